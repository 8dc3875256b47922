//! COMPARE AND WRITE race: iSCSI sessions of two initiators (one host, both given
//! the same LUN) race CAW on one LBA for many rounds, through a libiscsi client
//! built here (`support/caw_race.c`). In a round every racer reads the block, then
//! all send CAW(expected = what they read, new = their own block tagged with racer
//! and round) together; the round ends when every racer has its answer.
//!
//! Checked, round by round, from the client's log:
//! - every racer read the same block, and it is the previous round's winner's
//!   (all zeroes before the first round): the winners replay to the content;
//! - exactly one racer got GOOD, every other MISCOMPARE (0Eh, 1D00h) — a CAW that
//!   compared and wrote non-atomically would let two racers that read the same
//!   block both succeed (a deliberate local mutation dropping the range lock
//!   makes this test fail);
//! - the block read at the end, by the client and again over NBD, is the last
//!   winner's block, byte for byte.
//!
//! CAW_ROUNDS (default 1000) sets the number of rounds.

mod support;

use std::collections::BTreeMap;

use support::{build_iscsi_client, tool, tool_ok, Daemon, TARGET_IQN};

const INITIATORS: [&str; 2] = [
    "iqn.2026-01.org.lacuna.test:caw-a",
    "iqn.2026-01.org.lacuna.test:caw-b",
];
const LBA: u64 = 5;
const BLOCK_BYTES: usize = 512;
const MAGIC: u64 = 0x4341_5752_4143_4521;

fn mix(racer: u64, round: u64) -> u64 {
    let mut z =
        racer.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ round.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Racer `racer`'s block for `round`, as `caw_race.c` builds it.
fn block(racer: u64, round: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(BLOCK_BYTES);
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&racer.to_le_bytes());
    out.extend_from_slice(&round.to_le_bytes());
    for word in 3..(BLOCK_BYTES / 8) as u64 {
        out.extend_from_slice(&mix(racer, round).wrapping_add(word).to_le_bytes());
    }
    out
}

/// One round of the log: what each racer read and what each got.
struct Round {
    number: u64,
    reads: Vec<String>,
    results: Vec<char>,
}

fn parse_round(line: &str) -> Round {
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert!(
        fields.len() == 4 && fields[0] == "round",
        "malformed line {line:?}"
    );
    Round {
        number: fields[1].parse().expect("round number"),
        reads: fields[2]
            .strip_prefix("reads=")
            .expect("reads=")
            .split(',')
            .map(str::to_string)
            .collect(),
        results: fields[3]
            .strip_prefix("results=")
            .expect("results=")
            .chars()
            .collect(),
    }
}

/// Reads the raced block over NBD.
fn nbd_block(daemon: &Daemon, volume: &str) -> Vec<u8> {
    let script = format!(
        "import nbd, sys\nh = nbd.NBD()\nh.connect_uri(sys.argv[1])\n\
         sys.stdout.write(h.pread({BLOCK_BYTES}, {}).hex())\nh.shutdown()\n",
        LBA * BLOCK_BYTES as u64
    );
    let hex = tool_ok("/usr/bin/python3", &["-c", &script, &daemon.uri(volume)]);
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect()
}

#[test]
fn exactly_one_racer_wins_each_round_and_the_winners_replay_to_the_content() {
    let rounds: u64 = std::env::var("CAW_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let tmp = support::temp_dir("caw");
    let dir = tmp.path();
    let client = build_iscsi_client(dir, "caw_race.c", "caw-race");
    let daemon = Daemon::start(dir);
    daemon.cli_ok(&["volume", "create", "ats", "--size", "1M"]);
    daemon.cli_ok(&[
        "host",
        "create",
        "cluster",
        "--iqn",
        INITIATORS[0],
        "--iqn",
        INITIATORS[1],
    ]);
    daemon.cli_ok(&["host", "connect", "cluster", "ats", "--lun", "0"]);

    let portal = format!("127.0.0.1:{}", daemon.iscsi_ports[0]);
    let mut args = vec![
        portal,
        TARGET_IQN.to_string(),
        "0".into(),
        LBA.to_string(),
        rounds.to_string(),
    ];
    args.extend(INITIATORS.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = tool(client.to_str().unwrap(), &args);
    let log = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "caw-race failed ({}): {}\n{log}\ndaemon log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        daemon.log()
    );

    let mut lines = log.lines();
    let mut content = "zero".to_string();
    let mut wins: BTreeMap<usize, u64> = BTreeMap::new();
    let mut last_winner = None;
    for expected_round in 1..=rounds {
        let round = parse_round(lines.next().expect("a line per round"));
        assert_eq!(round.number, expected_round);
        assert_eq!(round.reads.len(), INITIATORS.len());
        assert_eq!(round.results.len(), INITIATORS.len());
        for (racer, read) in round.reads.iter().enumerate() {
            assert_eq!(
                read, &content,
                "round {expected_round}: racer {racer} read {read}, but the winners so far \
                 leave {content}"
            );
        }
        let winners: Vec<usize> = (0..INITIATORS.len())
            .filter(|&r| round.results[r] == 'G')
            .collect();
        assert_eq!(
            winners.len(),
            1,
            "round {expected_round}: results {:?} — exactly one racer must win",
            round.results
        );
        for (racer, result) in round.results.iter().enumerate() {
            assert!(
                *result == 'G' || *result == 'M',
                "round {expected_round}: racer {racer} got neither GOOD nor MISCOMPARE \
                 ({:?}): {}",
                round.results,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let winner = winners[0];
        *wins.entry(winner).or_default() += 1;
        content = format!("{winner}.{expected_round}");
        last_winner = Some((winner as u64, expected_round));
    }
    let final_line = lines.next().expect("the final line");
    assert_eq!(final_line, format!("final {content}"), "the final read");
    assert_eq!(lines.next(), None, "nothing after the final line");

    let (winner, round) = last_winner.expect("at least one round");
    assert!(
        nbd_block(&daemon, "ats") == block(winner, round),
        "over NBD the block is not racer {winner}'s block of round {round}"
    );
    eprintln!("caw race: {rounds} rounds, wins per racer {wins:?}, final content {content}");
    // Were one racer to win every round, its command would always be executed
    // before the other's arrived: the rounds would not be races, and would
    // prove nothing about atomicity.
    if rounds >= 100 {
        assert_eq!(wins.len(), INITIATORS.len(), "a racer never won: {wins:?}");
    }
}
