/* caw-race: iSCSI sessions racing COMPARE AND WRITE on one LBA, round after round
 * (crates/lacuna/tests/caw_race.rs).
 *
 * usage: caw-race PORTAL TARGET-IQN LUN LBA ROUNDS INITIATOR-IQN...
 *   one session per initiator name given (a name may repeat: each session gets
 *   its own ISID); racer i is the i-th name.
 *
 * A round: every racer reads the block (READ(16)), builds its own new block
 * tagged (racer, round), and queues COMPARE AND WRITE(expected = what it read,
 * new = its block); only when all are queued does one event loop send them all
 * and wait for every answer, so the commands reach the target together. The next
 * round starts once every racer has its answer: rounds never overlap.
 *
 * A block's tag: `zero` (all zeroes), `R.N` (racer R's block of round N, every
 * byte as built), or `garbage`. Output, one line per round:
 *   round N reads=TAG,TAG,... results=XY...
 * with a result per racer: G (GOOD), M (CHECK CONDITION, MISCOMPARE 0Eh with
 * ASC/ASCQ 1D00h), or E (anything else, with the details on stderr). Then
 *   final TAG
 * from a last read. The test judges the log; this program exits 2 only when a
 * session or a read fails.
 */
#include <inttypes.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>

#define BLOCK_BYTES 512
#define BLOCK_WORDS (BLOCK_BYTES / 8)
#define MAX_RACERS 8
#define MAX_ROUNDS 100000
#define MAGIC 0x4341575241434521ULL /* "CAWRACE!" */
#define UA_RETRIES 16

struct racer {
	struct iscsi_context *iscsi;
	unsigned char read[BLOCK_BYTES];
	unsigned char both[2 * BLOCK_BYTES]; /* expected, then new */
	int pending;
	char result;
};

static int lun;
static uint64_t lba;

static void die(const char *what, struct iscsi_context *iscsi)
{
	fprintf(stderr, "caw-race: %s%s%s\n", what, iscsi ? ": " : "", iscsi ? iscsi_get_error(iscsi) : "");
	exit(2);
}

static void put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get64(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static uint64_t mix(uint64_t racer, uint64_t round)
{
	uint64_t z = racer * 0x9E3779B97F4A7C15ULL ^ round * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

/* Racer `racer`'s block for `round`: MAGIC, racer, round, then a mix of both
 * (each word a different step of it, so no two blocks share a word). */
static void build(unsigned char *p, uint64_t racer, uint64_t round)
{
	put64(p, MAGIC);
	put64(p + 8, racer);
	put64(p + 16, round);
	for (int w = 3; w < BLOCK_WORDS; w++)
		put64(p + 8 * w, mix(racer, round) + (uint64_t)w);
}

static void tag(const unsigned char *p, char *out, size_t len)
{
	static const unsigned char zero[BLOCK_BYTES];
	if (memcmp(p, zero, BLOCK_BYTES) == 0) {
		snprintf(out, len, "zero");
		return;
	}
	unsigned char expect[BLOCK_BYTES];
	uint64_t racer = get64(p + 8), round = get64(p + 16);
	build(expect, racer, round);
	if (racer < MAX_RACERS && round <= MAX_ROUNDS && memcmp(p, expect, BLOCK_BYTES) == 0)
		snprintf(out, len, "%" PRIu64 ".%" PRIu64, racer, round);
	else
		snprintf(out, len, "garbage");
}

static void read_block(struct racer *r, unsigned char *out)
{
	for (int attempt = 0;; attempt++) {
		struct scsi_task *t = iscsi_read16_sync(r->iscsi, lun, lba, BLOCK_BYTES, BLOCK_BYTES, 0, 0, 0, 0, 0);
		if (t == NULL)
			die("READ(16)", r->iscsi);
		if (t->status == SCSI_STATUS_GOOD && t->datain.size == BLOCK_BYTES) {
			memcpy(out, t->datain.data, BLOCK_BYTES);
			scsi_free_scsi_task(t);
			return;
		}
		int ua = t->status == SCSI_STATUS_CHECK_CONDITION && t->sense.key == SCSI_SENSE_UNIT_ATTENTION;
		scsi_free_scsi_task(t);
		if (!ua || attempt >= UA_RETRIES)
			die("READ(16) failed", NULL);
	}
}

static void caw_done(struct iscsi_context *iscsi, int status, void *command_data, void *private_data)
{
	(void)iscsi;
	struct racer *r = private_data;
	struct scsi_task *t = command_data;
	if (status == SCSI_STATUS_GOOD) {
		r->result = 'G';
	} else if (status == SCSI_STATUS_CHECK_CONDITION && t != NULL && t->sense.key == SCSI_SENSE_MISCOMPARE &&
		   t->sense.ascq == SCSI_SENSE_ASCQ_MISCOMPARE_DURING_VERIFY) {
		r->result = 'M';
	} else {
		fprintf(stderr, "caw-race: COMPARE AND WRITE: status 0x%x sense %s ascq 0x%04x\n", status,
			t ? scsi_sense_key_str(t->sense.key) : "-", t ? t->sense.ascq : 0);
		r->result = 'E';
	}
	if (t != NULL)
		scsi_free_scsi_task(t);
	r->pending = 0;
}

/* Sends every racer's queued command and services all sessions until each has
 * its answer. */
static void run_round(struct racer *racers, int n)
{
	struct pollfd fds[MAX_RACERS];
	for (;;) {
		int waiting = 0;
		for (int i = 0; i < n; i++) {
			fds[i].fd = iscsi_get_fd(racers[i].iscsi);
			fds[i].events = (short)iscsi_which_events(racers[i].iscsi);
			fds[i].revents = 0;
			waiting += racers[i].pending;
		}
		if (waiting == 0)
			return;
		if (poll(fds, (nfds_t)n, 10000) <= 0)
			die("no answer to COMPARE AND WRITE in 10 s", NULL);
		for (int i = 0; i < n; i++)
			if (iscsi_service(racers[i].iscsi, fds[i].revents) < 0)
				die("iscsi_service", racers[i].iscsi);
	}
}

int main(int argc, char **argv)
{
	if (argc < 7) {
		fprintf(stderr, "usage: caw-race PORTAL TARGET-IQN LUN LBA ROUNDS INITIATOR-IQN...\n");
		return 1;
	}
	const char *portal = argv[1], *target = argv[2];
	lun = atoi(argv[3]);
	lba = strtoull(argv[4], NULL, 10);
	long rounds = strtol(argv[5], NULL, 10);
	int n = argc - 6;
	if (n < 2 || n > MAX_RACERS || rounds < 1 || rounds > MAX_ROUNDS) {
		fprintf(stderr, "caw-race: 2 to %d racers, 1 to %d rounds\n", MAX_RACERS, MAX_ROUNDS);
		return 1;
	}
	static struct racer racers[MAX_RACERS];
	for (int i = 0; i < n; i++) {
		struct racer *r = &racers[i];
		r->iscsi = iscsi_create_context(argv[6 + i]);
		if (r->iscsi == NULL)
			die("iscsi_create_context", NULL);
		if (iscsi_set_isid_random(r->iscsi, (uint32_t)i + 1, 0) != 0)
			die("set ISID", r->iscsi);
		iscsi_set_noautoreconnect(r->iscsi, 1);
		iscsi_set_targetname(r->iscsi, target);
		iscsi_set_session_type(r->iscsi, ISCSI_SESSION_NORMAL);
		iscsi_set_header_digest(r->iscsi, ISCSI_HEADER_DIGEST_NONE);
		if (iscsi_full_connect_sync(r->iscsi, portal, lun) != 0)
			die("login", r->iscsi);
		read_block(r, r->read); /* takes the power-on UNIT ATTENTION */
	}
	for (long round = 1; round <= rounds; round++) {
		printf("round %ld reads=", round);
		for (int i = 0; i < n; i++) {
			struct racer *r = &racers[i];
			char t[32];
			read_block(r, r->read);
			tag(r->read, t, sizeof t);
			printf("%s%s", i ? "," : "", t);
		}
		for (int i = 0; i < n; i++) {
			struct racer *r = &racers[i];
			memcpy(r->both, r->read, BLOCK_BYTES);
			build(r->both + BLOCK_BYTES, (uint64_t)i, (uint64_t)round);
			r->pending = 1;
			r->result = '?';
			if (iscsi_compareandwrite_task(r->iscsi, lun, lba, r->both, sizeof r->both, BLOCK_BYTES, 0, 0, 0, 0,
						       0, caw_done, r) == NULL)
				die("queue COMPARE AND WRITE", r->iscsi);
		}
		run_round(racers, n);
		printf(" results=");
		for (int i = 0; i < n; i++)
			putchar(racers[i].result);
		putchar('\n');
	}
	unsigned char last[BLOCK_BYTES];
	char t[32];
	read_block(&racers[0], last);
	tag(last, t, sizeof t);
	printf("final %s\n", t);
	for (int i = 0; i < n; i++) {
		iscsi_logout_sync(racers[i].iscsi);
		iscsi_destroy_context(racers[i].iscsi);
	}
	return 0;
}
