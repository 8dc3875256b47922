//! Who may use NBD exports: hosts proven by TLS-PSK (identity = host name) see
//! exactly the volumes connected to them; anonymous clients see everything only
//! with `--nbd-open-access`. Driven by real clients (nbdinfo, nbdsh/libnbd over
//! GnuTLS, qemu-img/qemu-io with `tls-creds-psk`) plus a raw socket for the exact
//! option replies and the malformed upgrades.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use support::{tool, tool_ok, Daemon};

const ALICE_KEY: &str = "a11ce0a11ce0a11ce0a11ce0a11ce0a11ce0a11ce0a11ce0a11ce0a11ce0a11c";
const BOB_KEY: &str = "b0bb0bb0bb0bb0bb0bb0bb0bb0bb0bb0bb0bb0bb0bb0bb0bb0bb0bb0bb0bb0b0";

const NBD_OPT_LIST: u32 = 3;
const NBD_OPT_STARTTLS: u32 = 5;
const NBD_OPT_INFO: u32 = 6;
const NBD_REP_ACK: u32 = 1;
const NBD_REP_ERR_INVALID: u32 = 0x8000_0003;
const NBD_REP_ERR_TLS_REQD: u32 = 0x8000_0005;

/// A daemon (started with `serve_args`, no open access unless they say so) with
/// volumes va and vb and snapshot va@s1; hosts alice (va, va@s1; key from a
/// psktool file) and bob (vb; key on the command line).
fn two_hosts(tag: &str, serve_args: &[&str]) -> Daemon {
    let dir = support::temp_dir(tag);
    let mut args = vec!["--log", "debug"];
    args.extend_from_slice(serve_args);
    let daemon = Daemon::start_exactly(dir.path(), "2G", &args, &[]).owning(dir);
    daemon.cli_ok(&["volume", "create", "va", "--size", "16M"]);
    daemon.cli_ok(&["volume", "create", "vb", "--size", "16M"]);
    daemon.cli_ok(&["snapshot", "create", "va", "--name", "s1"]);
    write_psk_file(&daemon.dir.join("alice.psk"), "alice", ALICE_KEY);
    write_psk_file(&daemon.dir.join("bob.psk"), "bob", BOB_KEY);
    let alice_file = daemon.dir.join("alice.psk");
    daemon.cli_ok(&[
        "host",
        "create",
        "alice",
        "--nbd-psk-file",
        alice_file.to_str().unwrap(),
    ]);
    daemon.cli_ok(&["host", "create", "bob", "--nbd-psk-key", BOB_KEY]);
    daemon.cli_ok(&["host", "connect", "alice", "va"]);
    daemon.cli_ok(&["host", "connect", "alice", "va@s1"]);
    daemon.cli_ok(&["host", "connect", "bob", "vb"]);
    daemon
}

/// psktool's format, `identity:hex`, in a directory of its own as `keys.psk`
/// too (what qemu's `tls-creds-psk,dir=` reads).
fn write_psk_file(path: &Path, identity: &str, key: &str) {
    std::fs::write(path, format!("{identity}:{key}\n")).unwrap();
    let qemu_dir = path.with_extension("d");
    std::fs::create_dir_all(&qemu_dir).unwrap();
    std::fs::write(qemu_dir.join("keys.psk"), format!("{identity}:{key}\n")).unwrap();
}

/// libnbd's TLS-PSK URI for `identity` (its key in `<dir>/<identity>.psk`).
fn tls_uri(daemon: &Daemon, identity: &str, export: &str) -> String {
    let file = daemon.dir.join(format!("{identity}.psk"));
    format!(
        "nbds://{identity}@127.0.0.1:{}/{export}?tls-psk-file={}",
        daemon.nbd_port,
        file.display()
    )
}

/// The export names `nbdinfo --list --json` shows.
fn listed(uri: &str) -> Vec<String> {
    let out = tool_ok("nbdinfo", &["--list", "--json", uri]);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mut names: Vec<String> = json["exports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["export-name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

/// Runs a Python script with libnbd (Debian's python3 has the bindings).
fn python(script: &str) -> String {
    tool_ok("/usr/bin/python3", &["-c", script])
}

/// For each export, `name ok` or `name ERRNO` as libnbd's NBD_OPT_INFO answers
/// it, over one connection as `identity` (TLS-PSK, key file `<identity>.psk`).
fn open_results(daemon: &Daemon, identity: &str, exports: &[&str]) -> String {
    let key_file = daemon.dir.join(format!("{identity}.psk"));
    python(&format!(
        r#"
import errno, nbd
h = nbd.NBD()
h.set_opt_mode(True)
h.set_tls(nbd.TLS_REQUIRE)
h.set_tls_username("{identity}")
h.set_tls_psk_file("{}")
h.connect_tcp("127.0.0.1", "{}")
for name in {exports:?}:
    h.set_export_name(name)
    try:
        h.opt_info()
        print(name, "ok")
    except nbd.Error as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
h.opt_abort()
"#,
        key_file.display(),
        daemon.nbd_port
    ))
}

#[test]
fn each_host_lists_reads_and_writes_only_its_own_volumes() {
    let daemon = two_hosts("nbd-hosts", &[]);
    assert_eq!(listed(&tls_uri(&daemon, "alice", "")), ["va", "va@s1"]);
    assert_eq!(listed(&tls_uri(&daemon, "bob", "")), ["vb"]);

    // Alice writes her volume and reads it back; her snapshot is read-only.
    let out = python(&format!(
        r#"
import nbd
h = nbd.NBD()
h.set_uri_allow_local_file(True)
h.connect_uri("{}")
h.pwrite(b"\xab" * 65536, 0)
h.flush()
assert h.pread(65536, 0) == b"\xab" * 65536
s = nbd.NBD()
s.set_uri_allow_local_file(True)
s.connect_uri("{}")
print("snapshot read-only", s.is_read_only())
"#,
        tls_uri(&daemon, "alice", "va"),
        tls_uri(&daemon, "alice", "va@s1")
    ));
    assert_eq!(out.trim(), "snapshot read-only True");

    // Another host's volume and a missing one answer alike: no such export.
    let out = open_results(&daemon, "alice", &["va", "vb", "nope", "vb@s1"]);
    assert_eq!(out.trim(), "va ok\nvb ENOENT\nnope ENOENT\nvb@s1 ENOENT");
    let out = open_results(&daemon, "bob", &["vb", "va", "va@s1"]);
    assert_eq!(out.trim(), "vb ok\nva ENOENT\nva@s1 ENOENT");

    // qemu with its own TLS-PSK credentials object reads what alice wrote.
    let qemu_dir = daemon.dir.join("alice.d");
    let object = format!(
        "tls-creds-psk,id=tls0,endpoint=client,dir={},username=alice",
        qemu_dir.display()
    );
    let image = |export: &str| {
        format!(
            "driver=nbd,host=127.0.0.1,port={},export={export},tls-creds=tls0",
            daemon.nbd_port
        )
    };
    let out = tool_ok(
        "qemu-io",
        &[
            "--object",
            &object,
            "--image-opts",
            &image("va"),
            "-c",
            "read -P 0xab 0 64k",
        ],
    );
    assert!(out.contains("read 65536/65536 bytes"), "{out}");
    assert!(!out.contains("failed"), "{out}");
    let out = tool(
        "qemu-img",
        &["info", "--object", &object, "--image-opts", &image("vb")],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no such export"), "{err}");
}

#[test]
fn wrong_keys_and_unknown_identities_fail_the_handshake_and_keys_stay_secret() {
    let daemon = two_hosts("nbd-keys", &[]);
    // Bob's name with alice's key; an identity no host has.
    std::fs::write(
        daemon.dir.join("bob-wrong.psk"),
        format!("bob:{ALICE_KEY}\n"),
    )
    .unwrap();
    std::fs::write(
        daemon.dir.join("mallory.psk"),
        format!("mallory:{ALICE_KEY}\n"),
    )
    .unwrap();
    for uri in [
        tls_uri(&daemon, "mallory", "vb"),
        format!(
            "nbds://bob@127.0.0.1:{}/vb?tls-psk-file={}",
            daemon.nbd_port,
            daemon.dir.join("bob-wrong.psk").display()
        ),
    ] {
        let out = tool("nbdinfo", &[&uri]);
        assert!(!out.status.success(), "{uri} got in");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("gnutls_handshake"), "{uri}: {err}");
    }
    assert!(daemon.log().contains("nbd: TLS refused"));
    // The daemon is healthy for the next client.
    assert_eq!(listed(&tls_uri(&daemon, "bob", "")), ["vb"]);

    // Keys change and go; a host with no other way in keeps its key.
    let new_key = "0123456789abcdef".repeat(2);
    daemon.cli_ok(&["host", "set", "bob", "--nbd-psk-key", &new_key]);
    assert!(!tool("nbdinfo", &[&tls_uri(&daemon, "bob", "vb")])
        .status
        .success());
    std::fs::write(daemon.dir.join("bob.psk"), format!("bob:{new_key}\n")).unwrap();
    assert_eq!(listed(&tls_uri(&daemon, "bob", "")), ["vb"]);
    let out = daemon.cli(&["host", "set", "bob", "--no-nbd-psk"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("initiator name"), "{err}");
    let out = daemon.cli(&["host", "set", "bob", "--nbd-psk-key", "abcd"]);
    assert!(!out.status.success(), "a 2-byte key was accepted");

    // No key in what the CLI shows, nor in the debug log.
    let shown = [
        daemon.cli_ok(&["host", "list"]),
        daemon.cli_ok(&["host", "show", "alice"]),
        daemon.cli_ok(&["--json", "host", "show", "bob"]),
        daemon.cli_ok(&["--json", "host", "list"]),
    ]
    .join("\n");
    assert!(shown.contains("nbd-psk: set"), "{shown}");
    assert!(shown.contains("\"nbd_psk\": true"), "{shown}");
    let log = daemon.log();
    assert!(
        log.contains("identity=\"bob\""),
        "debug log names identities"
    );
    for key in [ALICE_KEY, BOB_KEY, new_key.as_str()] {
        assert!(!shown.contains(key), "a key in the CLI output:\n{shown}");
        assert!(!log.contains(key), "a key in the daemon log");
        assert!(!log.contains(&key[..16]), "part of a key in the daemon log");
    }
}

/// A raw client: greeting read, fixed newstyle flags sent.
struct Raw {
    stream: TcpStream,
}

impl Raw {
    fn connect(daemon: &Daemon) -> Raw {
        let mut stream = TcpStream::connect(("127.0.0.1", daemon.nbd_port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut greeting = [0u8; 18];
        stream.read_exact(&mut greeting).unwrap();
        assert_eq!(&greeting[..16], b"NBDMAGICIHAVEOPT");
        stream.write_all(&1u32.to_be_bytes()).unwrap();
        Raw { stream }
    }

    fn option(&mut self, option: u32, data: &[u8]) {
        let mut out = b"IHAVEOPT".to_vec();
        out.extend_from_slice(&option.to_be_bytes());
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        out.extend_from_slice(data);
        self.stream.write_all(&out).unwrap();
    }

    /// One reply: its type and data.
    fn reply(&mut self) -> (u32, Vec<u8>) {
        let mut header = [0u8; 20];
        self.stream.read_exact(&mut header).unwrap();
        let length = u32::from_be_bytes(header[16..20].try_into().unwrap());
        let mut data = vec![0u8; length as usize];
        self.stream.read_exact(&mut data).unwrap();
        (u32::from_be_bytes(header[12..16].try_into().unwrap()), data)
    }

    fn info(&mut self, name: &str) -> (u32, String) {
        let mut data = (name.len() as u32).to_be_bytes().to_vec();
        data.extend_from_slice(name.as_bytes());
        data.extend_from_slice(&[0, 0]);
        self.option(NBD_OPT_INFO, &data);
        let (reply, message) = self.reply();
        (reply, String::from_utf8_lossy(&message).into_owned())
    }

    /// Reads until the server closes: true if it did (cleanly or by reset)
    /// within the read timeout.
    fn closed_by_server(&mut self) -> bool {
        let mut sink = [0u8; 4096];
        loop {
            match self.stream.read(&mut sink) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
    }
}

#[test]
fn anonymous_clients_see_nothing_on_a_closed_array_and_are_told_why() {
    let daemon = two_hosts("nbd-anon", &[]);
    assert!(listed(&daemon.uri("")).is_empty());
    let mut raw = Raw::connect(&daemon);
    raw.option(NBD_OPT_LIST, &[]);
    assert_eq!(raw.reply().0, NBD_REP_ACK, "an empty list");
    // The array offers TLS, and an anonymous client refused before it
    // upgraded is told TLS is required (the protocol's selective TLS).
    for name in ["va", "nope"] {
        let (reply, message) = raw.info(name);
        assert_eq!(reply, NBD_REP_ERR_TLS_REQD, "{name}");
        assert!(message.contains("TLS-PSK"), "{message}");
        assert!(message.contains("--nbd-open-access"), "{message}");
    }
    // What a person sees from qemu.
    let out = tool("qemu-img", &["info", &daemon.uri("va")]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--nbd-open-access"), "{err}");
}

#[test]
fn open_access_lets_anonymous_clients_see_everything_and_hosts_their_own() {
    let daemon = two_hosts("nbd-open", &["--nbd-open-access"]);
    assert_eq!(listed(&daemon.uri("")), ["va", "va@s1", "vb"]);
    let out = python(&format!(
        r#"
import nbd
h = nbd.NBD()
h.connect_uri("{}")
h.pwrite(b"\x5a" * 4096, 0)
print(h.pread(4096, 0) == b"\x5a" * 4096)
"#,
        daemon.uri("vb")
    ));
    assert_eq!(out.trim(), "True");
    // Hosts that authenticate still see only what is connected to them.
    assert_eq!(listed(&tls_uri(&daemon, "alice", "")), ["va", "va@s1"]);
}

#[test]
fn required_tls_refuses_plain_options_and_malformed_upgrades_close_cleanly() {
    let daemon = two_hosts(
        "nbd-require",
        &["--nbd-tls", "require", "--nbd-open-access"],
    );
    let mut raw = Raw::connect(&daemon);
    raw.option(NBD_OPT_LIST, &[]);
    let (reply, message) = raw.reply();
    assert_eq!(reply, NBD_REP_ERR_TLS_REQD);
    assert!(String::from_utf8_lossy(&message).contains("STARTTLS"));
    assert_eq!(raw.info("va").0, NBD_REP_ERR_TLS_REQD);
    // STARTTLS with data is refused and the session goes on.
    raw.option(NBD_OPT_STARTTLS, b"junk");
    assert_eq!(raw.reply().0, NBD_REP_ERR_INVALID);
    // STARTTLS twice: the second arrives where the ClientHello belongs.
    raw.option(NBD_OPT_STARTTLS, &[]);
    assert_eq!(raw.reply().0, NBD_REP_ACK);
    raw.option(NBD_OPT_STARTTLS, &[]);
    assert!(raw.closed_by_server());
    // Garbage instead of a ClientHello.
    let mut raw = Raw::connect(&daemon);
    raw.option(NBD_OPT_STARTTLS, &[]);
    assert_eq!(raw.reply().0, NBD_REP_ACK);
    raw.stream
        .write_all(&[0x16, 0x03, 0x01, 0xff, 0xff])
        .unwrap();
    raw.stream.write_all(&[0x42; 512]).unwrap();
    assert!(raw.closed_by_server());
    // Plain clients, even with open access, get nothing; hosts get theirs.
    let out = tool("nbdinfo", &["--list", &daemon.uri("")]);
    assert!(!out.status.success());
    assert_eq!(listed(&tls_uri(&daemon, "alice", "")), ["va", "va@s1"]);
    let out = open_results(&daemon, "bob", &["vb"]);
    assert_eq!(out.trim(), "vb ok");
}

/// A grant names the object, not the name: once a host's volume and snapshot
/// are eradicated, new ones of the same names are not its exports, in the
/// listing or when opened, also after a restart; granting them again works.
#[test]
fn a_grant_ends_with_its_volume_and_never_passes_to_a_namesake() {
    let dir = support::temp_dir("nbd-grants");
    let start = |dir: &Path| Daemon::start_exactly(dir, "2G", &[], &[]);
    let mut daemon = start(dir.path());
    daemon.cli_ok(&["volume", "create", "r1", "--size", "1M"]);
    daemon.cli_ok(&["volume", "create", "keep", "--size", "1M"]);
    daemon.cli_ok(&["snapshot", "create", "keep", "--name", "s"]);
    write_psk_file(&daemon.dir.join("hostb.psk"), "hostb", BOB_KEY);
    daemon.cli_ok(&["host", "create", "hostb", "--nbd-psk-key", BOB_KEY]);
    for export in ["r1", "keep@s"] {
        daemon.cli_ok(&["host", "connect", "hostb", export]);
    }
    assert_eq!(listed(&tls_uri(&daemon, "hostb", "")), ["keep@s", "r1"]);

    daemon.cli_ok(&["volume", "delete", "r1"]);
    daemon.cli_ok(&["volume", "eradicate", "r1"]);
    daemon.cli_ok(&["snapshot", "delete", "keep@s"]);
    daemon.cli_ok(&["snapshot", "eradicate", "keep@s"]);
    daemon.cli_ok(&["volume", "create", "r1", "--size", "2M"]);
    daemon.cli_ok(&["snapshot", "create", "keep", "--name", "s"]);
    let nobody = |daemon: &Daemon| {
        assert!(listed(&tls_uri(daemon, "hostb", "")).is_empty());
        let out = open_results(daemon, "hostb", &["r1", "keep@s"]);
        assert_eq!(out.trim(), "r1 ENOENT\nkeep@s ENOENT");
        let shown = daemon.cli_ok(&["host", "show", "hostb"]);
        assert!(
            !shown.contains("r1") && !shown.contains("keep@s"),
            "{shown}"
        );
    };
    nobody(&daemon);
    daemon.kill();
    let daemon = start(dir.path()).owning(dir);
    nobody(&daemon);
    daemon.cli_ok(&["host", "connect", "hostb", "r1"]);
    let out = open_results(&daemon, "hostb", &["r1", "keep@s"]);
    assert_eq!(out.trim(), "r1 ok\nkeep@s ENOENT");
}

/// A vVol bound to a host is an NBD export for that host only, from the bind
/// to the unbind; a bound snapshot vVol is a read-only one.
#[test]
fn a_bound_vvol_is_an_export_of_its_host_until_it_is_unbound() {
    let daemon = two_hosts("nbd-vvols", &[]);
    daemon.cli_ok(&["host", "protocol-endpoint", "alice"]);
    daemon.cli_ok(&["host", "protocol-endpoint", "bob"]);
    let created = daemon.cli_ok(&[
        "--json", "vvol", "create", "--type", "Data", "--size", "16M",
    ]);
    let vvol: serde_json::Value = serde_json::from_str(&created).unwrap();
    let id = vvol["id"].as_str().unwrap().to_string();
    let volume = format!("vvol-{}", id.strip_prefix("rfc4122.").unwrap());
    let before = listed(&tls_uri(&daemon, "alice", ""));
    assert!(!before.contains(&volume), "{before:?}");
    daemon.cli_ok(&["vvol", "bind", "alice", &id]);
    assert!(listed(&tls_uri(&daemon, "alice", "")).contains(&volume));
    assert!(
        !listed(&tls_uri(&daemon, "bob", "")).contains(&volume),
        "bound to alice only"
    );
    let results = open_results(&daemon, "bob", &[&volume]);
    assert_eq!(results.trim(), format!("{volume} ENOENT"));
    let key_file = daemon.dir.join("alice.psk");
    let read_back = python(&format!(
        r#"
import nbd
h = nbd.NBD()
h.set_tls(nbd.TLS_REQUIRE)
h.set_tls_username("alice")
h.set_tls_psk_file("{}")
h.set_export_name("{volume}")
h.connect_tcp("127.0.0.1", "{}")
h.pwrite(b"\x5a" * 65536, 0)
h.flush()
print(h.pread(65536, 0) == b"\x5a" * 65536, h.get_size())
"#,
        key_file.display(),
        daemon.nbd_port
    ));
    assert_eq!(read_back.trim(), format!("True {}", 16 << 20));
    daemon.cli_ok(&["vvol", "unbind", "alice", &id]);
    assert!(!listed(&tls_uri(&daemon, "alice", "")).contains(&volume));
    let results = open_results(&daemon, "alice", &[&volume]);
    assert_eq!(results.trim(), format!("{volume} ENOENT"));
}
