/* load-iscsi: many libiscsi sessions, one thread each, doing verified I/O on their
 * own region of a LUN for a bounded time (crates/lacuna/tests/load.rs).
 *
 * usage: load-iscsi PORTAL TARGET-IQN INITIATOR-IQN SECONDS REGION-SECTORS SEED SPEC...
 *   SPEC = CONN:LUN:FIRST-SECTOR — one session per SPEC; CONN is a unique number
 *   that also seeds the session's ISID (sessions share the initiator name).
 *
 * All sessions log in first; then `ready` is printed and the run starts when a
 * line arrives on stdin (so every client of the test starts at once, and logins
 * and process start-up are not in the measured latencies).
 *
 * Every 512-byte sector written carries (conn, sector, generation): three 64-bit
 * words and a 64-bit mix of them repeated (same layout as support/load_nbd.py), so
 * any read checks every sector against the generation the session last wrote
 * there (0: never written or zeroed, reads as zeroes). A session first fills its
 * region, then until the deadline: writes of 1-128 sectors at any sector offset,
 * reads of any range (checked), WRITE SAME zeroes, SYNCHRONIZE CACHE; at the end
 * it reads the whole region back.
 *
 * Output, one line per session: `iscsi conn=N ops=.. writes=.. reads=.. zeroes=..
 * flushes=.. written_bytes=.. read_bytes=.. max_latency_us=.. max_KIND_us=..
 * max_fill_us=..` — the latency of the slowest single command after the fill,
 * overall and per kind, and of the fill (its writes and flush) apart. Any failed command or wrong byte prints the reason and
 * exits with status 2.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>

#define SECTOR_BYTES 512
#define SECTOR_WORDS (SECTOR_BYTES / 8)
#define MAX_OP_SECTORS 128 /* 64 KiB per request */
#define MAX_SESSIONS 64
#define MAX_REGION_SECTORS (1u << 20)
#define MAGIC 0x4C4F41445445535FULL /* "LOADTES_" */
#define UA_RETRIES 16
/* Commands slower than this are reported on stderr as they happen (with the time
 * since start), so a stall can be placed in the run and matched across sessions. */
#define SLOW_US 250000

static const char *const kind_names[] = {"write", "read", "zero", "flush"};
static uint64_t start_us;

struct session {
	int conn;
	int lun;
	uint64_t first_sector;
	struct iscsi_context *iscsi;
};

static const char *portal, *target_iqn, *initiator_iqn;
static uint64_t seconds, region_sectors, seed;

static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static uint64_t mix(uint64_t conn, uint64_t sector, uint64_t gen)
{
	uint64_t z = conn * 0x9E3779B97F4A7C15ULL ^ sector * 0xBF58476D1CE4E5B9ULL ^ gen * 0x94D049BB133111EBULL;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

static void put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/* The content of `sector` written by `conn` at generation `gen` (0: zeroes). */
static void fill_sector(unsigned char *p, uint64_t conn, uint64_t sector, uint64_t gen)
{
	if (gen == 0) {
		memset(p, 0, SECTOR_BYTES);
		return;
	}
	put64(p, MAGIC ^ conn);
	put64(p + 8, sector);
	put64(p + 16, gen);
	uint64_t m = mix(conn, sector, gen);
	for (int w = 3; w < SECTOR_WORDS; w++)
		put64(p + 8 * w, m);
}

static uint64_t next(uint64_t *state)
{
	*state ^= *state << 13;
	*state ^= *state >> 7;
	*state ^= *state << 17;
	return *state;
}

enum kind { WRITE, READ, ZERO, FLUSH, KINDS };

struct stats {
	uint64_t writes, reads, zeroes, flushes, written_bytes, read_bytes, max_latency_us;
	uint64_t max_kind_us[KINDS];
	/* The first pass over the region (every session writing at once), timed apart. */
	int filling;
	uint64_t max_fill_us;
};

static void fail(const struct session *s, const char *what, struct iscsi_context *iscsi)
{
	fprintf(stderr, "load-iscsi conn %d: %s%s%s\n", s->conn, what, iscsi ? ": " : "",
		iscsi ? iscsi_get_error(iscsi) : "");
	exit(2);
}

/* Runs one command (`call`) measuring its latency; retries UNIT
 * ATTENTION (the command did not run) a bounded number of times. */
#define RUN(s, iscsi, st, kind, task, call, what)                                                      \
	do {                                                                                       \
		for (int attempt_ = 0;; attempt_++) {                                              \
			uint64_t t0_ = now_us();                                                   \
			task = call;                                                               \
			uint64_t dt_ = now_us() - t0_;                                             \
			if (dt_ > SLOW_US)                                                         \
				fprintf(stderr, "slow: iscsi conn=%d %s at_s=%.2f latency_ms=%" PRIu64 " phase=%s\n", \
					(s)->conn, kind_names[kind], (t0_ - start_us) / 1e6, dt_ / 1000,   \
					(st)->filling ? "fill" : "run");                                   \
			if ((st)->filling && dt_ > (st)->max_fill_us)                              \
				(st)->max_fill_us = dt_;                                           \
			if (!(st)->filling && dt_ > (st)->max_latency_us)                          \
				(st)->max_latency_us = dt_;                                        \
			if (!(st)->filling && dt_ > (st)->max_kind_us[kind])                       \
				(st)->max_kind_us[kind] = dt_;                                     \
			if (task == NULL)                                                          \
				fail(s, what, iscsi);                                              \
			if (task->status == SCSI_STATUS_GOOD)                                      \
				break;                                                             \
			int ua_ = task->status == SCSI_STATUS_CHECK_CONDITION &&                   \
				  task->sense.key == SCSI_SENSE_UNIT_ATTENTION;                    \
			if (!ua_ || attempt_ >= UA_RETRIES) {                                      \
				char m_[160];                                                      \
				snprintf(m_, sizeof m_, "%s: status 0x%x sense %s ascq 0x%04x", what, \
					 task->status, scsi_sense_key_str(task->sense.key),         \
					 task->sense.ascq);                                         \
				fail(s, m_, NULL);                                                 \
			}                                                                          \
			scsi_free_scsi_task(task);                                                 \
		}                                                                                  \
	} while (0)

static void do_write(const struct session *s, struct iscsi_context *iscsi, struct stats *st, uint32_t *gens,
		     uint64_t at, uint32_t count, uint32_t gen, unsigned char *buf)
{
	for (uint32_t i = 0; i < count; i++) {
		fill_sector(buf + (size_t)i * SECTOR_BYTES, s->conn, at + i, gen);
		gens[at + i] = gen;
	}
	struct scsi_task *t;
	RUN(s, iscsi, st, WRITE, t,
	    iscsi_write16_sync(iscsi, s->lun, s->first_sector + at, buf, count * SECTOR_BYTES, SECTOR_BYTES, 0, 0,
			       0, 0, 0),
	    "WRITE(16)");
	scsi_free_scsi_task(t);
	st->writes++;
	st->written_bytes += (uint64_t)count * SECTOR_BYTES;
}

static void do_read(const struct session *s, struct iscsi_context *iscsi, struct stats *st, const uint32_t *gens,
		    uint64_t at, uint32_t count, unsigned char *expected)
{
	struct scsi_task *t;
	RUN(s, iscsi, st, READ, t,
	    iscsi_read16_sync(iscsi, s->lun, s->first_sector + at, count * SECTOR_BYTES, SECTOR_BYTES, 0, 0, 0, 0,
			      0),
	    "READ(16)");
	if (t->datain.size != (int)(count * SECTOR_BYTES))
		fail(s, "READ(16) returned a short buffer", NULL);
	for (uint32_t i = 0; i < count; i++) {
		fill_sector(expected, s->conn, at + i, gens[at + i]);
		if (memcmp(t->datain.data + (size_t)i * SECTOR_BYTES, expected, SECTOR_BYTES) != 0) {
			char m[160];
			snprintf(m, sizeof m, "sector %" PRIu64 " of the region (generation %u) reads wrong bytes",
				 at + i, gens[at + i]);
			fail(s, m, NULL);
		}
	}
	scsi_free_scsi_task(t);
	st->reads++;
	st->read_bytes += (uint64_t)count * SECTOR_BYTES;
}

static void do_zero(const struct session *s, struct iscsi_context *iscsi, struct stats *st, uint32_t *gens,
		    uint64_t at, uint32_t count)
{
	static const unsigned char zero[SECTOR_BYTES];
	struct scsi_task *t;
	RUN(s, iscsi, st, ZERO, t,
	    iscsi_writesame16_sync(iscsi, s->lun, s->first_sector + at, (unsigned char *)zero, SECTOR_BYTES, count, 0,
				   0, 0, 0),
	    "WRITE SAME(16)");
	scsi_free_scsi_task(t);
	memset(gens + at, 0, count * sizeof *gens);
	st->zeroes++;
}

static void do_flush(const struct session *s, struct iscsi_context *iscsi, struct stats *st)
{
	struct scsi_task *t;
	RUN(s, iscsi, st, FLUSH, t, iscsi_synchronizecache16_sync(iscsi, s->lun, 0, 0, 0, 0), "SYNCHRONIZE CACHE(16)");
	scsi_free_scsi_task(t);
	st->flushes++;
}

/* Logs a session in (before the run: logins are not timed). */
static void login(struct session *s)
{
	struct iscsi_context *iscsi = iscsi_create_context(initiator_iqn);
	if (iscsi == NULL)
		fail(s, "iscsi_create_context", NULL);
	/* Sessions share the initiator name: a distinct ISID keeps each its own
	 * session instead of reinstating (and so closing) another's. */
	if (iscsi_set_isid_random(iscsi, (uint32_t)s->conn + 1, 0) != 0)
		fail(s, "set ISID", iscsi);
	iscsi_set_noautoreconnect(iscsi, 1);
	iscsi_set_targetname(iscsi, target_iqn);
	iscsi_set_session_type(iscsi, ISCSI_SESSION_NORMAL);
	iscsi_set_header_digest(iscsi, ISCSI_HEADER_DIGEST_NONE);
	if (iscsi_full_connect_sync(iscsi, portal, s->lun) != 0)
		fail(s, "login", iscsi);
	s->iscsi = iscsi;
}

static void *run_session(void *arg)
{
	const struct session *s = arg;
	struct iscsi_context *iscsi = s->iscsi;
	uint32_t *gens = calloc(region_sectors, sizeof *gens);
	unsigned char *buf = malloc(MAX_OP_SECTORS * SECTOR_BYTES);
	unsigned char *expected = malloc(SECTOR_BYTES);
	if (gens == NULL || buf == NULL || expected == NULL)
		fail(s, "out of memory", NULL);
	struct stats st = {0};
	uint64_t rng = seed ^ ((uint64_t)s->conn + 1) * 0x9E3779B97F4A7C15ULL;
	if (rng == 0)
		rng = 1;
	uint32_t gen = 1;
	uint64_t deadline = now_us() + seconds * 1000000u;
	/* Fill: every sector written once, so the region's metadata is in place early. */
	st.filling = 1;
	for (uint64_t at = 0; at < region_sectors; at += MAX_OP_SECTORS) {
		uint32_t count = (uint32_t)(region_sectors - at < MAX_OP_SECTORS ? region_sectors - at : MAX_OP_SECTORS);
		do_write(s, iscsi, &st, gens, at, count, gen, buf);
	}
	do_flush(s, iscsi, &st);
	st.filling = 0;
	while (now_us() < deadline) {
		uint32_t count = 1 + (uint32_t)(next(&rng) % MAX_OP_SECTORS);
		if (count > region_sectors)
			count = (uint32_t)region_sectors;
		uint64_t at = next(&rng) % (region_sectors - count + 1);
		uint64_t pick = next(&rng) % 100;
		if (pick < 45) {
			gen++;
			do_write(s, iscsi, &st, gens, at, count, gen, buf);
		} else if (pick < 92) {
			do_read(s, iscsi, &st, gens, at, count, expected);
		} else if (pick < 96) {
			do_zero(s, iscsi, &st, gens, at, count);
		} else {
			do_flush(s, iscsi, &st);
		}
	}
	do_flush(s, iscsi, &st);
	for (uint64_t at = 0; at < region_sectors; at += MAX_OP_SECTORS) {
		uint32_t count = (uint32_t)(region_sectors - at < MAX_OP_SECTORS ? region_sectors - at : MAX_OP_SECTORS);
		do_read(s, iscsi, &st, gens, at, count, expected);
	}
	iscsi_logout_sync(iscsi);
	iscsi_destroy_context(iscsi);
	printf("iscsi conn=%d ops=%" PRIu64 " writes=%" PRIu64 " reads=%" PRIu64 " zeroes=%" PRIu64
	       " flushes=%" PRIu64 " written_bytes=%" PRIu64 " read_bytes=%" PRIu64 " max_latency_us=%" PRIu64
	       " max_write_us=%" PRIu64 " max_read_us=%" PRIu64 " max_zero_us=%" PRIu64 " max_flush_us=%" PRIu64
	       " max_fill_us=%" PRIu64 "\n",
	       s->conn, st.writes + st.reads + st.zeroes + st.flushes, st.writes, st.reads, st.zeroes, st.flushes,
	       st.written_bytes, st.read_bytes, st.max_latency_us, st.max_kind_us[WRITE], st.max_kind_us[READ],
	       st.max_kind_us[ZERO], st.max_kind_us[FLUSH], st.max_fill_us);
	fflush(stdout);
	free(gens);
	free(buf);
	free(expected);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 8) {
		fprintf(stderr, "usage: load-iscsi PORTAL TARGET-IQN INITIATOR-IQN SECONDS REGION-SECTORS SEED "
				"CONN:LUN:FIRST-SECTOR...\n");
		return 1;
	}
	portal = argv[1];
	target_iqn = argv[2];
	initiator_iqn = argv[3];
	seconds = strtoull(argv[4], NULL, 10);
	region_sectors = strtoull(argv[5], NULL, 10);
	seed = strtoull(argv[6], NULL, 10);
	int n = argc - 7;
	if (n > MAX_SESSIONS || region_sectors == 0 || region_sectors > MAX_REGION_SECTORS) {
		fprintf(stderr, "load-iscsi: at most %d sessions, region of 1 to %u sectors\n", MAX_SESSIONS,
			MAX_REGION_SECTORS);
		return 1;
	}
	static struct session sessions[MAX_SESSIONS];
	static pthread_t threads[MAX_SESSIONS];
	for (int i = 0; i < n; i++) {
		if (sscanf(argv[7 + i], "%d:%d:%" SCNu64, &sessions[i].conn, &sessions[i].lun,
			   &sessions[i].first_sector) != 3) {
			fprintf(stderr, "load-iscsi: bad spec %s\n", argv[7 + i]);
			return 1;
		}
	}
	for (int i = 0; i < n; i++)
		login(&sessions[i]);
	/* Every session is logged in: the test starts all clients at once. */
	printf("ready\n");
	fflush(stdout);
	char go[16];
	if (fgets(go, sizeof go, stdin) == NULL)
		return 2;
	start_us = now_us();
	for (int i = 0; i < n; i++)
		if (pthread_create(&threads[i], NULL, run_session, &sessions[i]) != 0) {
			fprintf(stderr, "load-iscsi: pthread_create failed\n");
			return 2;
		}
	for (int i = 0; i < n; i++)
		pthread_join(threads[i], NULL);
	return 0;
}
