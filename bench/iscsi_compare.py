#!/usr/bin/python3
"""iSCSI benchmark (issue 5): Lacuna against tgt (file backstore on the same disk), side by
side in one run, through a small libiscsi initiator compiled here from the C source below.

Throughput: 4 KiB random write and read (QD32 and QD1), 1 MiB sequential write and read
(QD4), time based, each run --reps times on each target (alternating) and reported as the
median run (single runs of the same code varied by up to a third on this shared 2-core
machine), on a LUN of --size-gib of each target prefilled the same way (~2:1 compressible
data with ~30% duplicate 4 KiB blocks, as bench/nbd_compare.py); IOPS and MiB/s, ratio
Lacuna / tgt (target >= 1.5 on each). Each job also runs against a tgt LUN with its null
backstore (`--bstype null`: no storage work at all; reads send a buffer nobody read
from disk, writes are dropped): how much of tgt's figure is its storage and how much its
transport, the kernel and the client. At QD1 a job is a ping-pong, so where even tgt with no
storage is not 1.5 x tgt, the client's and the kernel's share of a round trip alone leaves no
server room to be 1.5 x faster. For the deep-queue and 1 MiB jobs it is no such bound: another
transport may move the bytes faster than tgt's does. So every run also counts the CPU the client
and each target daemon spend per I/O (the daemon's until it is idle again after the job), and sets
it against what 1.5 x tgt would leave a target with both cores busy all the time.

Client-issued offloads, each verified by reading samples back:
  - EXTENDED COPY (LID1, block->block segments, identification CSCDs naming the LUNs by their
    VPD 83h NAA designator) of an --xcopy-gib range written by the client: to another LUN in
    the largest commands the copy manager allows, to another LUN in 4 MiB commands (ESXi's
    default transfer size), and within one LUN; tgt has no copy manager, so the command is
    tried once and its rejection shown, and the host-side fallback (READ + WRITE of
    --fallback-gib, extrapolated) timed instead;
  - WRITE SAME (16) of a zero block with UNMAP, and without UNMAP (zero data), over
    --zero-gib, and UNMAP of the same range, first as each target's VPD B0h page advertises,
    then (where that fails) in 1 GiB commands/descriptors; tgt's WRITE SAME without UNMAP
    writes every block, so it runs over --tgt-ws-gib only and is extrapolated.
Targets for the offloads: milliseconds (seed 004: minutes for a 50 GiB clone, 24 s to zero
100 GiB).

usage: bench/iscsi_compare.py [--runtime 15] [--reps 3] [--size-gib 4] [--xcopy-gib 50] [--zero-gib 100]
                              [--fallback-gib 2] [--tgt-ws-gib 2] [--xcopy-timeout 180] [--no-record]
Needs: tgt (tgtd, tgtadm), libiscsi-dev and gcc, and a release build
(CARGO_TARGET_DIR=... cargo build --release -p lacuna; the binary is taken from
$CARGO_TARGET_DIR/release/lacuna, else target/release/lacuna; $LACUNA_REV, if set, is
recorded as what it was built from). Work files (Lacuna's data directory, tgt's backing
files, the compiled client) go to a temporary directory under $BENCH_DIR (default /var/tmp),
removed on exit; both daemons are stopped on exit, also on failure. Everything listens on
127.0.0.1 only (ephemeral ports; tgtd on its own control port). Any tool error aborts the run.
"""
import argparse
import datetime
import json
import os
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from serve_args import no_vasa_args  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LACUNA = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "lacuna")

LACUNA_IQN = "iqn.2024-01.org.lacuna:lacuna"
TGT_IQN = "iqn.2024-01.org.lacuna.bench:tgt"
GiB = 1 << 30
MiB = 1 << 20
BLOCK = 512  # both targets present 512-byte logical blocks (checked at run time)
JOBS = [
    # name, mode, bytes per I/O, queue depth
    ("4k randwrite QD32", "randwrite", 4096, 32),
    ("4k randread QD32", "randread", 4096, 32),
    ("4k randwrite QD1", "randwrite", 4096, 1),
    ("4k randread QD1", "randread", 4096, 1),
    ("1M write QD4", "write", MiB, 4),
    ("1M read QD4", "read", MiB, 4),
]
ESXI_XCOPY_BYTES = 4 * MiB  # ESXi's default XCOPY transfer size (DataMover.MaxHWTransferSize)

CLIENT_C = r'''
/* iscsi-bench-client: a small libiscsi initiator for bench/iscsi_compare.py.
 * Every mode logs in to one LUN (iscsi://127.0.0.1:PORT/IQN/LUN), does its work and prints
 * one JSON object on stdout. A transport error, or a SCSI error the mode does not expect,
 * exits 2 with the reason on stderr; a command the target rejects as unsupported (the
 * offload modes) prints {"supported": false, "sense": ...} and exits 3.
 *
 *   info URL [OTHER_LUN]                 geometry, 3PC bit, VPD B0 limits, copy manager limits
 *   load URL MODE BS QD SECONDS REGION SEED
 *                                        MODE randwrite|randread|write|read, time based
 *   fill URL OFFSET LENGTH SEED          1 MiB sequential writes at QD8, then SYNCHRONIZE CACHE
 *   xcopy URL DST_LUN SRC_LBA DST_LBA BLOCKS SEG_BLOCKS SEGS_PER_CMD
 *                                        EXTENDED COPY (LID1, 02h segments, E4h CSCDs by NAA)
 *   writesame URL LBA BLOCKS UNMAP CHUNK WRITE SAME (16) of a zero block
 *   unmap URL LBA BLOCKS CHUNK           UNMAP, descriptors of CHUNK blocks (0: the VPD B0 limit)
 *   hostcopy URL SRC_LBA DST_LBA BLOCKS  READ + WRITE in 1 MiB steps at QD8 (what a host does
 *                                        without EXTENDED COPY), then SYNCHRONIZE CACHE
 *   compare URL DST_LUN SRC_LBA DST_LBA BLOCKS SAMPLES
 *   zeros URL LBA BLOCKS SAMPLES         sampled 1 MiB reads: equal / all zero
 *   sync URL                             SYNCHRONIZE CACHE (16) of the whole LUN
 * Byte sizes are bytes; LBAs and BLOCKS are logical blocks of the LUN.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>

#define INITIATOR "iqn.2024-01.org.lacuna:bench-client"
#define MiB (1024u * 1024u)

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "iscsi-bench-client: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(2);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t xorshift(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

static uint64_t be(const unsigned char *p, int n)
{
	uint64_t v = 0;
	for (int i = 0; i < n; i++)
		v = (v << 8) | p[i];
	return v;
}

static void put_be(unsigned char *p, uint64_t v, int n)
{
	for (int i = n - 1; i >= 0; i--, v >>= 8)
		p[i] = v & 0xff;
}

struct lun {
	struct iscsi_context *iscsi;
	int lun;
	uint32_t block;
	uint64_t blocks;
};

static const char *sense_str(struct scsi_task *t)
{
	static char buf[256];
	snprintf(buf, sizeof buf, "%s (0x%x) / %s (0x%04x)", scsi_sense_key_str(t->sense.key), t->sense.key,
		 scsi_sense_ascq_str(t->sense.ascq), t->sense.ascq);
	return buf;
}

/* A finished command: NULL task is a transport error (fatal); CHECK CONDITION returns 0 and
 * leaves the sense in the task unless fatal is set. */
static int good(struct lun *l, struct scsi_task *t, const char *what, int fatal)
{
	if (t == NULL)
		die("%s: %s", what, iscsi_get_error(l->iscsi));
	if (t->status == SCSI_STATUS_GOOD)
		return 1;
	if (t->status != SCSI_STATUS_CHECK_CONDITION || fatal)
		die("%s: status 0x%x, sense %s", what, t->status, sense_str(t));
	return 0;
}

static void unsupported(struct scsi_task *t, const char *what)
{
	printf("{\"supported\": false, \"command\": \"%s\", \"sense\": \"%s\"}\n", what, sense_str(t));
	exit(3);
}

static struct lun open_lun(const char *url_s)
{
	struct lun l;
	l.iscsi = iscsi_create_context(INITIATOR);
	if (l.iscsi == NULL)
		die("iscsi_create_context failed");
	struct iscsi_url *url = iscsi_parse_full_url(l.iscsi, url_s);
	if (url == NULL)
		die("bad URL %s: %s", url_s, iscsi_get_error(l.iscsi));
	iscsi_set_targetname(l.iscsi, url->target);
	iscsi_set_session_type(l.iscsi, ISCSI_SESSION_NORMAL);
	iscsi_set_header_digest(l.iscsi, ISCSI_HEADER_DIGEST_NONE);
	if (iscsi_full_connect_sync(l.iscsi, url->portal, url->lun) != 0)
		die("login to %s failed: %s", url_s, iscsi_get_error(l.iscsi));
	l.lun = url->lun;
	iscsi_destroy_url(url);
	struct scsi_task *t = iscsi_readcapacity16_sync(l.iscsi, l.lun);
	good(&l, t, "READ CAPACITY 16", 1);
	if (t->datain.size < 12)
		die("READ CAPACITY 16: short data");
	l.blocks = be(t->datain.data, 8) + 1;
	l.block = be(t->datain.data + 8, 4);
	scsi_free_scsi_task(t);
	return l;
}

/* Consumes the unit attentions (power on, reset, ...) a LUN other than the login one
 * reports to its first command in this session. */
static void prime(struct lun *l, int lun)
{
	for (int i = 0; i < 8; i++) {
		struct scsi_task *t = iscsi_testunitready_sync(l->iscsi, lun);
		int ok = good(l, t, "TEST UNIT READY", 0);
		int ua = !ok && t->sense.key == SCSI_SENSE_UNIT_ATTENTION;
		if (!ok && !ua)
			die("TEST UNIT READY of LUN %d: %s", lun, sense_str(t));
		scsi_free_scsi_task(t);
		if (ok)
			return;
	}
	die("LUN %d keeps reporting unit attentions", lun);
}

static void close_lun(struct lun *l)
{
	iscsi_logout_sync(l->iscsi);
	iscsi_destroy_context(l->iscsi);
}

/* Raw INQUIRY data (standard, or a VPD page); NULL with *t kept when rejected. */
static struct scsi_task *inquiry(struct lun *l, int lun, int evpd, int page)
{
	struct scsi_task *t = iscsi_inquiry_sync(l->iscsi, lun, evpd, page, 255);
	if (!good(l, t, "INQUIRY", 0)) {
		scsi_free_scsi_task(t);
		return NULL;
	}
	return t;
}

/* The NAA designator (association: logical unit) of VPD 83h: its 4-byte header and 16 bytes. */
static int naa_designator(struct lun *l, int lun, unsigned char out[20])
{
	struct scsi_task *t = inquiry(l, lun, 1, 0x83);
	if (t == NULL)
		return 0;
	unsigned char *d = t->datain.data;
	int len = t->datain.size, end = 4 + (int)be(d + 2, 2), found = 0;
	if (end > len)
		end = len;
	for (int at = 4; at + 4 <= end; at += 4 + d[at + 3]) {
		int assoc = (d[at + 1] >> 4) & 3, type = d[at + 1] & 0xf, dlen = d[at + 3];
		if (assoc == 0 && type == 3 && dlen == 16 && at + 20 <= end) {
			memcpy(out, d + at, 20);
			found = 1;
			break;
		}
	}
	scsi_free_scsi_task(t);
	return found;
}

struct limits {
	uint64_t max_ws_len;
	uint32_t max_unmap, max_unmap_bdc;
	int have_b0;
};

static struct limits block_limits(struct lun *l)
{
	struct limits b = {0};
	struct scsi_task *t = inquiry(l, l->lun, 1, 0xb0);
	if (t == NULL)
		return b;
	unsigned char *d = t->datain.data;
	if (t->datain.size >= 44) {
		b.have_b0 = 1;
		b.max_unmap = be(d + 20, 4);
		b.max_unmap_bdc = be(d + 24, 4);
		b.max_ws_len = be(d + 36, 8);
	}
	scsi_free_scsi_task(t);
	return b;
}

struct copy_params {
	int ok;
	char sense[256];
	uint32_t max_segments, max_list_len, max_segment_len;
};

static struct copy_params copy_params(struct lun *l)
{
	struct copy_params p = {0};
	struct scsi_task *t = iscsi_receive_copy_results_sync(l->iscsi, l->lun, SCSI_COPY_RESULTS_OP_PARAMS, 0, 1024);
	if (!good(l, t, "RECEIVE COPY RESULTS", 0)) {
		snprintf(p.sense, sizeof p.sense, "%s", sense_str(t));
		scsi_free_scsi_task(t);
		return p;
	}
	unsigned char *d = t->datain.data;
	if (t->datain.size < 20)
		die("RECEIVE COPY RESULTS: short data");
	p.ok = 1;
	p.max_segments = be(d + 10, 2);
	p.max_list_len = be(d + 12, 4);
	p.max_segment_len = be(d + 16, 4);
	scsi_free_scsi_task(t);
	return p;
}

/* ------------------------------------------------------------------ asynchronous I/O engine */

enum op { OP_READ, OP_WRITE };

struct slot {
	struct run *run;
	unsigned char *buf;
	uint64_t lba, dst_lba;
	int stage; /* hostcopy: 0 reading, 1 writing */
	double t0;
};

struct run {
	struct lun *l;
	int write, random, hostcopy;
	uint32_t len, nblk;
	uint64_t base, region_blocks, next, end_block; /* blocks */
	uint64_t dst_base;
	double deadline; /* time based when > 0; else until end_block */
	uint64_t rng;
	long ios;
	int inflight;
	double lat_sum;
	unsigned char dup[64][4096];
};

/* ~2:1 compressible 4 KiB blocks, ~30% of them from a pool of 64 duplicates (as fio's
 * --buffer_compress_percentage=50 --dedupe_percentage=30 in the NBD benchmarks). */
static void gen_block(unsigned char *p, uint64_t *rng, unsigned char dup[64][4096])
{
	uint64_t r = xorshift(rng);
	if (r % 100 < 30) {
		memcpy(p, dup[(r >> 8) % 64], 4096);
		return;
	}
	for (int i = 0; i < 2048; i += 8) {
		uint64_t v = xorshift(rng);
		memcpy(p + i, &v, 8);
	}
	memset(p + 2048, 0, 2048);
}

static void gen_buf(struct run *r, unsigned char *buf)
{
	for (uint32_t off = 0; off < r->len; off += 4096)
		gen_block(buf + off, &r->rng, r->dup);
}

static void completed(struct iscsi_context *iscsi, int status, void *command_data, void *private);

/* Starts the slot's next I/O; returns 0 when there is nothing left to do. */
static int submit(struct run *r, struct slot *s)
{
	struct lun *l = r->l;
	if (r->deadline > 0 ? now() >= r->deadline : r->next >= r->end_block)
		return 0;
	if (r->random) {
		s->lba = r->base + (xorshift(&r->rng) % (r->region_blocks / r->nblk)) * r->nblk;
	} else {
		if (r->next + r->nblk > r->end_block) {
			if (r->deadline > 0)
				r->next = r->base;
			else
				die("region is not a multiple of the I/O size");
		}
		s->lba = r->next;
		r->next += r->nblk;
	}
	s->t0 = now();
	s->stage = 0;
	struct scsi_task *t;
	if (r->write) {
		gen_buf(r, s->buf);
		t = iscsi_write16_task(l->iscsi, l->lun, s->lba, s->buf, r->len, l->block, 0, 0, 0, 0, 0, completed, s);
	} else {
		t = iscsi_read16_task(l->iscsi, l->lun, s->lba, r->len, l->block, 0, 0, 0, 0, 0, completed, s);
	}
	if (t == NULL)
		die("queueing I/O: %s", iscsi_get_error(l->iscsi));
	r->inflight++;
	return 1;
}

static void completed(struct iscsi_context *iscsi, int status, void *command_data, void *private)
{
	struct slot *s = private;
	struct run *r = s->run;
	struct scsi_task *t = command_data;
	if (status != SCSI_STATUS_GOOD)
		die("%s at LBA %" PRIu64 ": status 0x%x, %s; %s", (r->write || s->stage) ? "WRITE" : "READ",
		    s->stage ? s->dst_lba : s->lba, status, t ? sense_str(t) : "-", iscsi_get_error(iscsi));
	if (r->hostcopy && s->stage == 0) {
		/* The read finished: write its data at the destination. */
		if ((uint32_t)t->datain.size != r->len)
			die("READ returned %d bytes", t->datain.size);
		memcpy(s->buf, t->datain.data, r->len);
		scsi_free_scsi_task(t);
		s->stage = 1;
		s->dst_lba = s->lba - r->base + r->dst_base;
		if (iscsi_write16_task(iscsi, r->l->lun, s->dst_lba, s->buf, r->len, r->l->block, 0, 0, 0, 0, 0,
				       completed, s) == NULL)
			die("queueing WRITE: %s", iscsi_get_error(iscsi));
		return;
	}
	scsi_free_scsi_task(t);
	r->inflight--;
	r->ios++;
	r->lat_sum += now() - s->t0;
	submit(r, s);
}

static double drive(struct run *r, int qd)
{
	struct slot *slots = calloc(qd, sizeof *slots);
	double start = now();
	for (int i = 0; i < qd; i++) {
		slots[i].run = r;
		if (posix_memalign((void **)&slots[i].buf, 4096, r->len))
			die("out of memory");
		if (!submit(r, &slots[i]))
			break;
	}
	while (r->inflight > 0) {
		struct pollfd pfd = {.fd = iscsi_get_fd(r->l->iscsi), .events = iscsi_which_events(r->l->iscsi)};
		if (poll(&pfd, 1, 1000) < 0)
			die("poll failed");
		if (iscsi_service(r->l->iscsi, pfd.revents) < 0)
			die("iscsi_service: %s", iscsi_get_error(r->l->iscsi));
	}
	double elapsed = now() - start;
	for (int i = 0; i < qd; i++)
		free(slots[i].buf);
	free(slots);
	return elapsed;
}

static struct run *new_run(struct lun *l, uint32_t len, uint64_t seed)
{
	struct run *r = calloc(1, sizeof *r);
	r->l = l;
	r->len = len;
	if (len % l->block || len % 4096)
		die("I/O size %u is not a multiple of the block size %u and 4096", len, l->block);
	r->nblk = len / l->block;
	uint64_t dseed = 0x9e3779b97f4a7c15ull; /* the duplicate pool is the same for every run */
	for (int i = 0; i < 64; i++)
		for (int j = 0; j < 4096; j += 8) {
			uint64_t v = xorshift(&dseed);
			memcpy(r->dup[i] + j, &v, 8);
		}
	r->rng = seed * 0x2545f4914f6cdd1dull + 1;
	return r;
}

static void sync_cache(struct lun *l)
{
	struct scsi_task *t = iscsi_synchronizecache16_sync(l->iscsi, l->lun, 0, 0, 0, 0);
	good(l, t, "SYNCHRONIZE CACHE 16", 1);
	scsi_free_scsi_task(t);
}

/* ------------------------------------------------------------------------------ modes */

static uint64_t num(const char *s)
{
	char *end;
	uint64_t v = strtoull(s, &end, 0);
	if (*s == 0 || *end != 0)
		die("not a number: %s", s);
	return v;
}

static int mode_load(int argc, char **argv)
{
	if (argc != 9)
		die("usage: load URL MODE BS QD SECONDS REGION SEED");
	struct lun l = open_lun(argv[2]);
	const char *m = argv[3];
	uint32_t bs = num(argv[4]);
	int qd = num(argv[5]);
	double secs = num(argv[6]);
	uint64_t region = num(argv[7]);
	struct run *r = new_run(&l, bs, num(argv[8]));
	r->write = !strcmp(m, "randwrite") || !strcmp(m, "write");
	r->random = !strcmp(m, "randwrite") || !strcmp(m, "randread");
	if (!r->write && strcmp(m, "read") && strcmp(m, "randread"))
		die("unknown mode %s", m);
	if (region % bs || region / l.block > l.blocks)
		die("region %" PRIu64 " does not fit the LUN or the I/O size", region);
	r->base = 0;
	r->next = 0;
	r->region_blocks = region / l.block;
	r->end_block = r->region_blocks;
	r->deadline = now() + secs;
	double elapsed = drive(r, qd);
	printf("{\"ios\": %ld, \"seconds\": %.6f, \"iops\": %.1f, \"mib_s\": %.2f, \"mean_lat_us\": %.1f}\n", r->ios,
	       elapsed, r->ios / elapsed, r->ios * (double)bs / MiB / elapsed, r->lat_sum / r->ios * 1e6);
	close_lun(&l);
	return 0;
}

static int mode_fill(int argc, char **argv)
{
	if (argc != 6)
		die("usage: fill URL OFFSET LENGTH SEED");
	struct lun l = open_lun(argv[2]);
	uint64_t off = num(argv[3]), len = num(argv[4]);
	struct run *r = new_run(&l, MiB, num(argv[5]));
	if (off % MiB || len % MiB || (off + len) / l.block > l.blocks)
		die("fill range must be whole MiB inside the LUN");
	r->write = 1;
	r->base = r->next = off / l.block;
	r->end_block = (off + len) / l.block;
	double t0 = now();
	double io = drive(r, 8);
	double s0 = now();
	sync_cache(&l);
	double done = now();
	printf("{\"bytes\": %" PRIu64 ", \"seconds\": %.6f, \"write_seconds\": %.6f, \"sync_seconds\": %.6f}\n", len,
	       done - t0, io, done - s0);
	close_lun(&l);
	return 0;
}

static int mode_hostcopy(int argc, char **argv)
{
	if (argc != 6)
		die("usage: hostcopy URL SRC_LBA DST_LBA BLOCKS");
	struct lun l = open_lun(argv[2]);
	uint64_t src = num(argv[3]), dst = num(argv[4]), n = num(argv[5]);
	struct run *r = new_run(&l, MiB, 1);
	if ((n * l.block) % MiB || src + n > l.blocks || dst + n > l.blocks)
		die("hostcopy range must be whole MiB inside the LUN");
	r->hostcopy = 1;
	r->base = r->next = src;
	r->dst_base = dst;
	r->end_block = src + n;
	double t0 = now();
	drive(r, 8);
	sync_cache(&l);
	printf("{\"bytes\": %" PRIu64 ", \"seconds\": %.6f}\n", n * l.block, now() - t0);
	close_lun(&l);
	return 0;
}

static int mode_info(int argc, char **argv)
{
	if (argc != 3 && argc != 4)
		die("usage: info URL [OTHER_LUN]");
	struct lun l = open_lun(argv[2]);
	struct scsi_task *t = inquiry(&l, l.lun, 0, 0);
	if (t == NULL || t->datain.size < 8)
		die("standard INQUIRY failed");
	int tpc = (t->datain.data[5] >> 3) & 1;
	char vendor[9] = {0}, product[17] = {0};
	memcpy(vendor, t->datain.data + 8, 8);
	memcpy(product, t->datain.data + 16, 16);
	for (char *c = vendor; *c; c++)
		if (*c == '"' || *c == '\\')
			*c = ' ';
	for (char *c = product; *c; c++)
		if (*c == '"' || *c == '\\')
			*c = ' ';
	scsi_free_scsi_task(t);
	struct limits b = block_limits(&l);
	struct copy_params p = copy_params(&l);
	unsigned char naa[20];
	int have_naa = naa_designator(&l, l.lun, naa);
	printf("{\"vendor\": \"%s\", \"product\": \"%s\", \"block_size\": %u, \"blocks\": %" PRIu64
	       ", \"tpc\": %d, \"vpd_b0\": %d, \"max_write_same_blocks\": %" PRIu64
	       ", \"max_unmap_blocks\": %u, \"max_unmap_descriptors\": %u, \"naa\": %d, \"copy_manager\": %s",
	       vendor, product, l.block, l.blocks, tpc, b.have_b0, b.max_ws_len, b.max_unmap, b.max_unmap_bdc,
	       have_naa, p.ok ? "true" : "false");
	if (p.ok)
		printf(", \"max_segments\": %u, \"max_descriptor_list\": %u, \"max_segment_bytes\": %u", p.max_segments,
		       p.max_list_len, p.max_segment_len);
	else
		printf(", \"copy_results_sense\": \"%s\"", p.sense);
	printf("}\n");
	close_lun(&l);
	return 0;
}

static int mode_xcopy(int argc, char **argv)
{
	if (argc != 9)
		die("usage: xcopy URL DST_LUN SRC_LBA DST_LBA BLOCKS SEG_BLOCKS SEGS_PER_CMD");
	struct lun l = open_lun(argv[2]);
	int dst_lun = num(argv[3]);
	uint64_t src = num(argv[4]), dst = num(argv[5]), n = num(argv[6]);
	uint64_t seg_blocks = num(argv[7]), segs_per_cmd = num(argv[8]);
	unsigned char naa_src[20], naa_dst[20];
	if (!naa_designator(&l, l.lun, naa_src) || !naa_designator(&l, dst_lun, naa_dst))
		die("no NAA designator in VPD 83h");
	int ncscd = dst_lun == l.lun ? 1 : 2;
	prime(&l, dst_lun);
	struct copy_params p = copy_params(&l);
	if (p.ok) {
		/* Largest segment the copy manager takes, in whole 4 KiB (a segment counts 16 bits). */
		uint64_t max_blocks = p.max_segment_len / l.block;
		if (max_blocks > 65535)
			max_blocks = 65535;
		max_blocks -= max_blocks % (4096 / l.block);
		uint64_t max_segs = (p.max_list_len - 32 * ncscd) / 28;
		if (max_segs > p.max_segments)
			max_segs = p.max_segments;
		if (seg_blocks == 0)
			seg_blocks = max_blocks;
		if (segs_per_cmd == 0)
			segs_per_cmd = max_segs;
		if (seg_blocks > max_blocks || segs_per_cmd > max_segs)
			die("segments of %" PRIu64 " blocks x %" PRIu64 " exceed the copy manager's limits", seg_blocks,
			    segs_per_cmd);
	} else {
		/* No copy manager parameters (tgt): try one ordinary command anyway. */
		if (seg_blocks == 0)
			seg_blocks = 8192;
		if (segs_per_cmd == 0)
			segs_per_cmd = 1;
	}
	if (src + n > l.blocks || dst + n > l.blocks)
		die("copy range outside the LUN");
	size_t cap = 16 + 32 * ncscd + 28 * segs_per_cmd;
	unsigned char *list = malloc(cap);
	uint64_t done = 0;
	long commands = 0, segments = 0;
	double t0 = now(), slowest = 0;
	while (done < n) {
		memset(list, 0, cap);
		unsigned char *c = list + 16;
		for (int i = 0; i < ncscd; i++, c += 32) {
			c[0] = 0xe4; /* identification descriptor CSCD, block device */
			memcpy(c + 4, i == 0 ? naa_src : naa_dst, 20);
			put_be(c + 29, l.block, 3);
		}
		int segs = 0;
		for (; segs < (int)segs_per_cmd && done < n; segs++, c += 28) {
			uint64_t b = n - done < seg_blocks ? n - done : seg_blocks;
			c[0] = 0x02; /* block -> block */
			put_be(c + 2, 24, 2);
			put_be(c + 4, 0, 2);
			put_be(c + 6, ncscd - 1, 2);
			put_be(c + 10, b, 2);
			put_be(c + 12, src + done, 8);
			put_be(c + 20, dst + done, 8);
			done += b;
		}
		list[1] = 0x18; /* LIST ID USAGE 11b: no list identifier, nothing held */
		put_be(list + 2, 32 * ncscd, 2);
		put_be(list + 8, 28 * segs, 4);
		struct iscsi_data data = {.size = c - list, .data = list};
		double c0 = now();
		struct scsi_task *t = iscsi_extended_copy_sync(l.iscsi, l.lun, &data);
		double took = now() - c0;
		if (!good(&l, t, "EXTENDED COPY", 0)) {
			if (commands == 0)
				unsupported(t, "EXTENDED COPY");
			die("EXTENDED COPY number %ld failed: %s", commands + 1, sense_str(t));
		}
		scsi_free_scsi_task(t);
		if (took > slowest)
			slowest = took;
		commands++;
		segments += segs;
		fprintf(stderr, "progress: command %ld done, %" PRIu64 " bytes copied, took %.6f s\n", commands,
			done * l.block, took);
	}
	double elapsed = now() - t0;
	double s0 = now();
	sync_cache(&l);
	double synced = now() - s0;
	printf("{\"supported\": true, \"bytes\": %" PRIu64 ", \"seconds\": %.6f, \"commands\": %ld, \"segments\": %ld, "
	       "\"segment_bytes\": %" PRIu64 ", \"slowest_command_s\": %.6f, \"sync_seconds\": %.6f}\n",
	       n * l.block, elapsed, commands, segments, seg_blocks * l.block, slowest, synced);
	free(list);
	close_lun(&l);
	return 0;
}

static int mode_writesame(int argc, char **argv)
{
	if (argc != 7)
		die("usage: writesame URL LBA BLOCKS UNMAP CHUNK");
	struct lun l = open_lun(argv[2]);
	uint64_t lba = num(argv[3]), n = num(argv[4]), chunk = num(argv[6]);
	int unmap = num(argv[5]);
	if (lba + n > l.blocks)
		die("WRITE SAME range outside the LUN");
	struct limits b = block_limits(&l);
	if (chunk == 0)
		chunk = b.max_ws_len ? b.max_ws_len : 0xffffffffu;
	if (chunk > 0xffffffffu)
		chunk = 0xffffffffu;
	chunk -= chunk % (4096 / l.block);
	unsigned char *zero = calloc(1, l.block);
	uint64_t done = 0;
	long commands = 0;
	double t0 = now();
	while (done < n) {
		uint64_t k = n - done < chunk ? n - done : chunk;
		struct scsi_task *t =
		    iscsi_writesame16_sync(l.iscsi, l.lun, lba + done, zero, l.block, (uint32_t)k, 0, unmap, 0, 0);
		if (!good(&l, t, "WRITE SAME 16", 0)) {
			if (commands == 0)
				unsupported(t, unmap ? "WRITE SAME 16 (UNMAP)" : "WRITE SAME 16");
			die("WRITE SAME 16 number %ld failed: %s", commands + 1, sense_str(t));
		}
		scsi_free_scsi_task(t);
		done += k;
		commands++;
	}
	double elapsed = now() - t0;
	double s0 = now();
	sync_cache(&l);
	double synced = now() - s0;
	printf("{\"supported\": true, \"bytes\": %" PRIu64 ", \"seconds\": %.6f, \"commands\": %ld, \"sync_seconds\": %.6f, "
	       "\"max_write_same_blocks\": %" PRIu64 "}\n",
	       n * l.block, elapsed, commands, synced, b.max_ws_len);
	close_lun(&l);
	return 0;
}

static int mode_unmap(int argc, char **argv)
{
	if (argc != 6)
		die("usage: unmap URL LBA BLOCKS CHUNK");
	struct lun l = open_lun(argv[2]);
	uint64_t lba = num(argv[3]), n = num(argv[4]), chunk = num(argv[5]);
	if (lba + n > l.blocks)
		die("UNMAP range outside the LUN");
	struct limits b = block_limits(&l);
	if (!b.have_b0 || b.max_unmap == 0 || b.max_unmap_bdc == 0) {
		printf("{\"supported\": false, \"command\": \"UNMAP\", \"sense\": \"VPD B0h reports no UNMAP "
		       "(MAXIMUM UNMAP LBA COUNT %u, DESCRIPTOR COUNT %u)\"}\n",
		       b.max_unmap, b.max_unmap_bdc);
		exit(3);
	}
	uint64_t per = b.max_unmap;
	if (chunk && chunk < per)
		per = chunk;
	per -= per % (4096 / l.block);
	int per_cmd = b.max_unmap_bdc > 256 ? 256 : b.max_unmap_bdc;
	struct unmap_list *list = calloc(per_cmd, sizeof *list);
	uint64_t done = 0;
	long commands = 0, descriptors = 0;
	double t0 = now();
	while (done < n) {
		int k = 0;
		for (; k < per_cmd && done < n; k++) {
			uint64_t m = n - done < per ? n - done : per;
			list[k].lba = lba + done;
			list[k].num = m;
			done += m;
		}
		struct scsi_task *t = iscsi_unmap_sync(l.iscsi, l.lun, 0, 0, list, k);
		if (!good(&l, t, "UNMAP", 0)) {
			if (commands == 0)
				unsupported(t, "UNMAP");
			die("UNMAP number %ld failed: %s", commands + 1, sense_str(t));
		}
		scsi_free_scsi_task(t);
		commands++;
		descriptors += k;
	}
	double elapsed = now() - t0;
	double s0 = now();
	sync_cache(&l);
	double synced = now() - s0;
	printf("{\"supported\": true, \"bytes\": %" PRIu64 ", \"seconds\": %.6f, \"commands\": %ld, \"descriptors\": %ld, "
	       "\"sync_seconds\": %.6f, \"max_unmap_blocks\": %u, \"max_unmap_descriptors\": %u}\n",
	       n * l.block, elapsed, commands, descriptors, synced, b.max_unmap, b.max_unmap_bdc);
	free(list);
	close_lun(&l);
	return 0;
}

static unsigned char *read_mib(struct lun *l, int lun, uint64_t lba)
{
	struct scsi_task *t = iscsi_read16_sync(l->iscsi, lun, lba, MiB, l->block, 0, 0, 0, 0, 0);
	good(l, t, "READ 16", 1);
	if ((uint32_t)t->datain.size != MiB)
		die("READ 16 returned %d bytes", t->datain.size);
	unsigned char *copy = malloc(MiB);
	memcpy(copy, t->datain.data, MiB);
	scsi_free_scsi_task(t);
	return copy;
}

static int all_zero(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

/* Sample offsets (in blocks, whole MiB): the first and last MiB and random ones between. */
static uint64_t sample_at(int i, int samples, uint64_t n, uint32_t block, uint64_t *rng)
{
	uint64_t per = MiB / block, mibs = n / per;
	if (i == 0)
		return 0;
	if (i == samples - 1)
		return (mibs - 1) * per;
	return (xorshift(rng) % mibs) * per;
}

static int mode_compare(int argc, char **argv)
{
	if (argc != 8)
		die("usage: compare URL DST_LUN SRC_LBA DST_LBA BLOCKS SAMPLES");
	struct lun l = open_lun(argv[2]);
	int dst_lun = num(argv[3]);
	uint64_t src = num(argv[4]), dst = num(argv[5]), n = num(argv[6]);
	int samples = num(argv[7]), zero = 0;
	uint64_t rng = 12345;
	prime(&l, dst_lun);
	if ((n * l.block) % MiB || samples < 2)
		die("compare needs whole MiB and at least 2 samples");
	for (int i = 0; i < samples; i++) {
		uint64_t off = sample_at(i, samples, n, l.block, &rng);
		unsigned char *a = read_mib(&l, l.lun, src + off), *b = read_mib(&l, dst_lun, dst + off);
		if (memcmp(a, b, MiB))
			die("copy differs from its source at source LBA %" PRIu64, src + off);
		zero += all_zero(a, MiB);
		free(a);
		free(b);
	}
	if (zero == samples)
		die("every sampled MiB of the source is zero: nothing was written there");
	printf("{\"samples\": %d, \"equal\": %d, \"zero_samples\": %d}\n", samples, samples, zero);
	close_lun(&l);
	return 0;
}

static int mode_zeros(int argc, char **argv)
{
	if (argc != 6)
		die("usage: zeros URL LBA BLOCKS SAMPLES");
	struct lun l = open_lun(argv[2]);
	uint64_t lba = num(argv[3]), n = num(argv[4]);
	int samples = num(argv[5]);
	uint64_t rng = 777;
	if ((n * l.block) % MiB || samples < 2)
		die("zeros needs whole MiB and at least 2 samples");
	for (int i = 0; i < samples; i++) {
		uint64_t off = sample_at(i, samples, n, l.block, &rng);
		unsigned char *a = read_mib(&l, l.lun, lba + off);
		if (!all_zero(a, MiB))
			die("not zero at LBA %" PRIu64, lba + off);
		free(a);
	}
	printf("{\"samples\": %d, \"zero\": %d}\n", samples, samples);
	close_lun(&l);
	return 0;
}

static int mode_sync(int argc, char **argv)
{
	if (argc != 3)
		die("usage: sync URL");
	struct lun l = open_lun(argv[2]);
	double t0 = now();
	sync_cache(&l);
	printf("{\"seconds\": %.6f}\n", now() - t0);
	close_lun(&l);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2)
		die("usage: iscsi-bench-client MODE ... (see the source)");
	const char *m = argv[1];
	if (!strcmp(m, "load"))
		return mode_load(argc, argv);
	if (!strcmp(m, "fill"))
		return mode_fill(argc, argv);
	if (!strcmp(m, "hostcopy"))
		return mode_hostcopy(argc, argv);
	if (!strcmp(m, "info"))
		return mode_info(argc, argv);
	if (!strcmp(m, "xcopy"))
		return mode_xcopy(argc, argv);
	if (!strcmp(m, "writesame"))
		return mode_writesame(argc, argv);
	if (!strcmp(m, "unmap"))
		return mode_unmap(argc, argv);
	if (!strcmp(m, "compare"))
		return mode_compare(argc, argv);
	if (!strcmp(m, "zeros"))
		return mode_zeros(argc, argv);
	if (!strcmp(m, "sync"))
		return mode_sync(argc, argv);
	die("unknown mode %s", m);
	return 2;
}
'''


def log(msg):
    print(msg, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before port {port} opened")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what}: port {port} never opened")


def run(cmd, timeout=None, ok=(0,)):
    """Run a tool; an exit status outside `ok` raises with its output."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode not in ok:
        raise RuntimeError(f"{shlex.join(cmd)} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    return r


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu_s():
    """CPU seconds of this script's finished children (the client runs)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def dirty_mib():
    with open("/proc/meminfo") as f:
        kb = {line.split(":")[0]: int(line.split()[1]) for line in f}
    return (kb["Dirty"] + kb["Writeback"]) / 1024.0


def wait_idle(daemons, timeout=900):
    """Wait until every daemon used < 5% of a core over 0.5 s and the kernel holds < 64 MiB of
    dirty or writeback pages (so neither target's background work, nor the page cache flushing a
    previous job's writes, runs into the next measurement). Returns the seconds waited."""
    start = time.perf_counter()
    hist = [(start, [cpu_s(d.pid) for d in daemons])]
    while True:
        time.sleep(0.1)
        for d in daemons:
            d.check_alive()
        now = time.perf_counter()
        hist.append((now, [cpu_s(d.pid) for d in daemons]))
        while len(hist) > 1 and hist[1][0] <= now - 0.5:
            hist.pop(0)
        if (hist[0][0] <= now - 0.5 and all(c - c0 < 0.025 for c, c0 in zip(hist[-1][1], hist[0][1]))
                and dirty_mib() < 64):
            return hist[0][0] - start
        if now - start > timeout:
            raise RuntimeError(f"daemons still busy after {timeout} s")


class Lacuna:
    name = "lacuna"

    def __init__(self, tmp, capacity):
        self.dir = os.path.join(tmp, "lacuna")
        self.data = os.path.join(self.dir, "data")
        os.makedirs(self.dir)
        self.nbd, self.api, self.iscsi = free_port(), free_port(), free_port()
        self.log_path = os.path.join(self.dir, "lacuna.log")
        self.log_file = open(self.log_path, "w")
        vasa_off = no_vasa_args(LACUNA)
        self.proc = subprocess.Popen([
            LACUNA, "serve", *vasa_off, "--data-dir", self.data, "--capacity", capacity,
            "--nbd-listen", f"127.0.0.1:{self.nbd}", "--api-listen", f"127.0.0.1:{self.api}", "--nbd-open-access",
            "--iscsi-listen", f"127.0.0.1:{self.iscsi}", "--iscsi-open-access",
        ], stdout=subprocess.DEVNULL, stderr=self.log_file)
        self.pid = self.proc.pid
        for port in (self.nbd, self.api, self.iscsi):
            wait_port(port, self.proc, "lacuna serve")
        self.luns = {}

    def url(self, lun):
        return f"iscsi://127.0.0.1:{self.iscsi}/{LACUNA_IQN}/{lun}"

    def create(self, name, size_gib):
        """Volumes appear to open-access initiators as LUN 0.. in creation order."""
        self.check_alive()
        run([LACUNA, "--api", f"http://127.0.0.1:{self.api}", "--data-dir", self.data,
             "volume", "create", name, f"{size_gib}G"])
        self.luns[name] = len(self.luns)
        return self.luns[name]

    def check_alive(self):
        if self.proc.poll() is not None:
            raise RuntimeError(f"lacuna serve died ({self.proc.returncode}); log tail:\n{self.log_tail()}")

    def log_tail(self):
        try:
            with open(self.log_path) as f:
                return "".join(f.readlines()[-30:])
        except OSError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                log("lacuna serve did not stop within 20 s of SIGTERM: SIGKILL")
                self.proc.kill()
                self.proc.wait()
        self.log_file.close()


class Tgt:
    name = "tgt"

    def __init__(self, tmp, perf_gib, off_gib):
        self.dir = os.path.join(tmp, "tgt")
        os.makedirs(self.dir)
        self.port = free_port()
        # A control port (socket /run/tgtd/socket.N) no other tgtd uses.
        self.ctl = next(n for n in range(7300, 8300) if not os.path.exists(f"/run/tgtd/socket.{n}"))
        self.log_file = open(os.path.join(self.dir, "tgtd.log"), "w")
        self.proc = subprocess.Popen(["tgtd", "-f", "-C", str(self.ctl), "--iscsi", f"portal=127.0.0.1:{self.port}"],
                                     stdout=self.log_file, stderr=subprocess.STDOUT)
        self.pid = self.proc.pid
        wait_port(self.port, self.proc, "tgtd")
        self.perf_img = os.path.join(self.dir, "perf.img")
        self.off_img = os.path.join(self.dir, "offload.img")
        run(["truncate", "-s", f"{perf_gib}G", self.perf_img])
        run(["truncate", "-s", f"{off_gib}G", self.off_img])
        self.adm("--op", "new", "--mode", "target", "--tid", "1", "-T", TGT_IQN)
        # LUN 0 is tgt's controller; backing stores are LUN 1 (throughput) and LUN 2 (offloads,
        # thin_provisioning=1 so that UNMAP and WRITE SAME with UNMAP punch holes).
        self.adm("--op", "new", "--mode", "logicalunit", "--tid", "1", "--lun", "1", "--bstype", "rdwr", "-b", self.perf_img)
        self.adm("--op", "new", "--mode", "logicalunit", "--tid", "1", "--lun", "2", "--bstype", "rdwr", "-b", self.off_img)
        self.adm("--op", "update", "--mode", "logicalunit", "--tid", "1", "--lun", "2", "--params", "thin_provisioning=1")
        # LUN 3: the null backstore (no storage work at all): tgt's transport alone.
        self.adm("--op", "new", "--mode", "logicalunit", "--tid", "1", "--lun", "3", "--bstype", "null", "-b", "/dev/null")
        self.adm("--op", "bind", "--mode", "target", "--tid", "1", "-I", "ALL")
        self.luns = {"perf": 1, "offload": 2, "null": 3}

    def adm(self, *args):
        self.check_alive()
        return run(["tgtadm", "-C", str(self.ctl), "--lld", "iscsi", *args]).stdout

    def url(self, lun):
        return f"iscsi://127.0.0.1:{self.port}/{TGT_IQN}/{lun}"

    def check_alive(self):
        if self.proc.poll() is not None:
            raise RuntimeError(f"tgtd died ({self.proc.returncode})")

    def stop(self):
        if self.proc.poll() is None:
            try:
                run(["tgtadm", "-C", str(self.ctl), "--lld", "iscsi", "--op", "delete", "--mode", "target", "--tid", "1", "--force"])
                run(["tgtadm", "-C", str(self.ctl), "--op", "delete", "--mode", "system"])
                self.proc.wait(10)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                log(f"tgtd did not shut down through tgtadm ({e}); killing it")
                self.proc.kill()
                self.proc.wait()
        self.log_file.close()
        for suffix in ("", ".lock"):
            try:
                os.unlink(f"/run/tgtd/socket.{self.ctl}{suffix}")
            except FileNotFoundError:
                pass


class Client:
    def __init__(self, tmp):
        src = os.path.join(tmp, "iscsi-bench-client.c")
        self.path = os.path.join(tmp, "iscsi-bench-client")
        with open(src, "w") as f:
            f.write(CLIENT_C)
        run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", self.path, src, "-liscsi"])

    def __call__(self, *args, allow_unsupported=False, timeout=None):
        """One client run; its JSON. Exit 3 (command rejected as unsupported) is returned, not
        raised, when allow_unsupported."""
        r = run([self.path, *map(str, args)], timeout=timeout, ok=(0, 3) if allow_unsupported else (0,))
        return json.loads(r.stdout)

    def xcopy_bounded(self, args, timeout):
        """An EXTENDED COPY run that may not finish: returns (JSON or None, progress lines)."""
        with tempfile.TemporaryFile("w+") as err:
            p = subprocess.Popen([self.path, *map(str, args)], stdout=subprocess.PIPE, stderr=err, text=True)
            try:
                out, _ = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
                err.seek(0)
                return None, [l for l in err.read().splitlines() if l.startswith("progress:")]
            err.seek(0)
            text = err.read()
            if p.returncode not in (0, 3):
                raise RuntimeError(f"iscsi-bench-client {shlex.join(map(str, args))} failed ({p.returncode}):\n{text[-4000:]}")
            return json.loads(out), [l for l in text.splitlines() if l.startswith("progress:")]


def fmt_s(s):
    if s is None:
        return "—"
    return f"{s * 1000:.2f} ms" if s < 1 else f"{s:.2f} s"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runtime", type=int, default=15, help="seconds per throughput job and target")
    ap.add_argument("--reps", type=int, default=3,
                    help="runs of each throughput job on each target (alternating); the median is reported")
    ap.add_argument("--size-gib", type=int, default=4, help="throughput LUN size")
    ap.add_argument("--xcopy-gib", type=int, default=50, help="range written and then copied by EXTENDED COPY")
    ap.add_argument("--zero-gib", type=int, default=100, help="range zeroed by WRITE SAME / UNMAP")
    ap.add_argument("--fallback-gib", type=int, default=2, help="tgt: range copied host-side and written under the zeroing")
    ap.add_argument("--tgt-ws-gib", type=int, default=2, help="tgt: range zeroed by WRITE SAME without UNMAP (writes every block)")
    ap.add_argument("--xcopy-timeout", type=int, default=180, help="seconds allowed for the within-LUN EXTENDED COPY")
    ap.add_argument("--no-record", action="store_true")
    ap.add_argument("--jobs", default="",
                    help="comma-separated names of throughput jobs (e.g. '4k randread QD1') to run alone: "
                         "no offloads, nothing recorded, only their ratios printed (for a quick check)")
    args = ap.parse_args()
    jobs = JOBS
    if args.jobs:
        wanted = [name.strip() for name in args.jobs.split(",")]
        jobs = [job for job in JOBS if job[0] in wanted]
        if len(jobs) != len(wanted):
            sys.exit(f"--jobs: names are {', '.join(job[0] for job in JOBS)}")
    if not os.path.exists(LACUNA):
        sys.exit(f"{LACUNA} missing: build it first (CARGO_TARGET_DIR=... cargo build --release -p lacuna)")
    for tool in ("tgtd", "tgtadm", "gcc"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} missing (apt-get install -y tgt gcc libiscsi-dev)")
    if not os.path.exists("/usr/include/iscsi/iscsi.h"):
        sys.exit("libiscsi headers missing (apt-get install -y libiscsi-dev)")
    X, Z, F, T = args.xcopy_gib, args.zero_gib, args.fallback_gib, args.tgt_ws_gib
    if F > Z or T > Z or F > X:
        sys.exit("--fallback-gib and --tgt-ws-gib must not exceed --zero-gib, nor --fallback-gib --xcopy-gib")
    if args.reps < 1 or args.runtime < 1:
        sys.exit("--reps and --runtime must be at least 1")
    off_gib = max(2 * X, Z)
    started = time.time()
    tmp = tempfile.mkdtemp(prefix="lacuna-iscsi-bench-", dir=os.environ.get("BENCH_DIR", "/var/tmp"))
    daemons = []
    res, off = {}, {"lacuna": {}, "tgt": {}}
    try:
        client = Client(tmp)
        lac = Lacuna(tmp, "1T")
        daemons.append(lac)
        for v in ("perf",):
            lac.create(v, args.size_gib)
        for v in ("xa", "xb", "xc", "xd"):
            lac.create(v, off_gib)
        tgt = Tgt(tmp, args.size_gib, off_gib)
        daemons.append(tgt)
        targets = [(lac, lac.luns["perf"]), (tgt, tgt.luns["perf"])]
        info = {}
        for t, lun in targets:
            info[t.name] = client("info", t.url(lun))
            if info[t.name]["block_size"] != BLOCK or info[t.name]["blocks"] * BLOCK != args.size_gib * GiB:
                raise RuntimeError(f"{t.name} LUN {lun}: {info[t.name]}")
        info["lacuna-offload"] = client("info", lac.url(lac.luns["xa"]))
        info["tgt-offload"] = client("info", tgt.url(tgt.luns["offload"]))
        log(f"lacuna: {info['lacuna-offload']}\ntgt:    {info['tgt-offload']}")

        # ------------------------------------------------------------------ throughput
        fills = {}
        for t, lun in targets:
            wait_idle(daemons)
            fills[t.name] = client("fill", t.url(lun), 0, args.size_gib * GiB, 1)
            log(f"prefill {t.name:7} {args.size_gib} GiB in {fills[t.name]['seconds']:.1f} s")
        seed = 10
        runs = [(t.name, t, t.url(lun)) for t, lun in targets] + [("tgt-null", tgt, tgt.url(tgt.luns["null"]))]
        for name, mode, bs, qd in jobs:
            for rep in range(args.reps):
                for who, daemon, url in runs:
                    seed += 1
                    wait_idle(daemons)
                    client0, daemon0 = children_cpu_s(), cpu_s(daemon.pid)
                    r = client("load", url, mode, bs, qd, args.runtime, args.size_gib * GiB, seed)
                    client_s = children_cpu_s() - client0
                    # The daemon's CPU until it is idle again: work a job leaves behind (a commit,
                    # a flush of what it wrote) is the job's too.
                    wait_idle(daemons)
                    ios = r["ios"]
                    r["client_us_per_io"] = 1e6 * client_s / ios
                    r["daemon_us_per_io"] = 1e6 * (cpu_s(daemon.pid) - daemon0) / ios
                    res.setdefault((name, who), []).append(r)
                    log(f"{name:20} {who:8} run {rep + 1}: {r['iops']:10.0f} IOPS {r['mib_s']:8.1f} MiB/s  "
                        f"mean {r['mean_lat_us']:8.1f} us  CPU per I/O: client {r['client_us_per_io']:.1f} us, "
                        f"target {r['daemon_us_per_io']:.1f} us")

        if args.jobs:
            for name, mode, bs, qd in jobs:
                key = "iops" if bs == 4096 else "mib_s"
                l, t, n = (median_run(res[(name, who)], key) for who in ("lacuna", "tgt", "tgt-null"))
                print(f"{name}: lacuna {l[key]:.0f}, tgt {t[key]:.0f}, tgt null {n[key]:.0f} {key}; "
                      f"lacuna / tgt {l[key] / t[key]:.2f}; mean latency {l['mean_lat_us']:.1f} / "
                      f"{t['mean_lat_us']:.1f} / {n['mean_lat_us']:.1f} us; CPU per I/O (client / target) "
                      f"{l['client_us_per_io']:.1f} / {l['daemon_us_per_io']:.1f} us")
            return

        # ------------------------------------------------------------------ offloads: tgt
        tu = tgt.url(tgt.luns["offload"])
        fb = F * GiB // BLOCK
        o = off["tgt"]
        wait_idle(daemons)
        o["fill"] = client("fill", tu, 0, F * GiB, 2)
        o["xcopy"] = client("xcopy", tu, tgt.luns["offload"], 0, X * GiB // BLOCK, fb, 0, 0, allow_unsupported=True)
        log(f"tgt EXTENDED COPY: {o['xcopy']}")
        wait_idle(daemons)
        o["hostcopy"] = client("hostcopy", tu, 0, X * GiB // BLOCK, fb)
        o["hostcopy_check"] = client("compare", tu, tgt.luns["offload"], 0, X * GiB // BLOCK, fb, 16)
        log(f"tgt host copy {F} GiB: {o['hostcopy']['seconds']:.2f} s")

        def zeroing(o, t, url, key, op, unmap, data_gib, refill_seed):
            """One zeroing offload over [0, Z): first as the target advertises (one command or
            descriptor if its VPD B0h page allows), then, if that fails or leaves data, in 1 GiB
            pieces. [0, data_gib) holds written data before each attempt (refilled when
            refill_seed is set) and is checked afterwards (32 samples), the whole range too (8)."""
            zb = Z * GiB // BLOCK
            for label, chunk in (("advertised", 0), ("1 GiB", GiB // BLOCK)):
                if refill_seed is not None:
                    wait_idle(daemons)
                    client("fill", url, 0, data_gib * GiB, refill_seed)
                wait_idle(daemons)
                if op == "writesame":
                    r = client("writesame", url, 0, zb, unmap, chunk, allow_unsupported=True)
                else:
                    r = client("unmap", url, 0, zb, chunk, allow_unsupported=True)
                r["busy_after_s"] = wait_idle(daemons)
                r["zero"] = None
                if r["supported"]:
                    try:
                        client("zeros", url, 0, data_gib * GiB // BLOCK, 32)
                        client("zeros", url, 0, zb, 8)
                        r["zero"] = True
                    except RuntimeError as e:
                        r["zero"] = False
                        r["zero_error"] = str(e).strip().splitlines()[-1]
                o[f"{key}:{label}"] = r
                log(f"{t.name} {key} ({label}): {r}")
                if r["zero"]:
                    return
                if refill_seed is None:
                    raise RuntimeError(f"{t.name} {key} failed and there is no data left to retry on: {r}")

        zeroing(o, tgt, tu, "ws_unmap", "writesame", 1, F, 3)
        zeroing(o, tgt, tu, "unmap", "unmap", 0, F, 4)
        # WRITE SAME without UNMAP writes every block on tgt: over --tgt-ws-gib only, 1 GiB a command.
        wait_idle(daemons)
        client("fill", tu, 0, T * GiB, 5)
        wait_idle(daemons)
        r = client("writesame", tu, 0, T * GiB // BLOCK, 0, GiB // BLOCK, allow_unsupported=True)
        r["busy_after_s"] = wait_idle(daemons)
        client("zeros", tu, 0, T * GiB // BLOCK, 32)
        o["ws_zero"] = r
        log(f"tgt WRITE SAME zero data {T} GiB: {r}")

        # ------------------------------------------------------------------ offloads: lacuna
        o = off["lacuna"]
        xa, xb, xc, xd = (lac.luns[v] for v in ("xa", "xb", "xc", "xd"))
        au = lac.url(xa)
        xblocks = X * GiB // BLOCK
        wait_idle(daemons)
        o["fill"] = client("fill", au, 0, X * GiB, 2)
        log(f"lacuna: wrote {X} GiB in {o['fill']['seconds']:.1f} s")
        o["fill_settle_s"] = wait_idle(daemons)
        for key, dst, seg, per in (("xcopy_other", xb, 0, 0), ("xcopy_esxi", xc, ESXI_XCOPY_BYTES // BLOCK, 1),
                                   ("xcopy_other2", xd, 0, 0)):
            wait_idle(daemons)
            r = client("xcopy", au, dst, 0, 0, xblocks, seg, per)
            r["busy_after_s"] = wait_idle(daemons)
            r["check"] = client("compare", au, dst, 0, 0, xblocks, 32)
            o[key] = r
            log(f"lacuna {key}: {r}")
        # Each zeroes a LUN holding an X GiB copy of written data.
        zeroing(o, lac, lac.url(xb), "ws_unmap", "writesame", 1, X, None)
        zeroing(o, lac, lac.url(xc), "ws_zero", "writesame", 0, X, None)
        zeroing(o, lac, lac.url(xd), "unmap", "unmap", 0, X, None)
        # Within one LUN last: it may not finish (then the daemon is stopped, busy or not).
        wait_idle(daemons)
        r, progress = client.xcopy_bounded(["xcopy", au, xa, 0, X * GiB // BLOCK, xblocks, 0, 0], args.xcopy_timeout)
        if r is not None:
            r["busy_after_s"] = wait_idle(daemons)
            r["check"] = client("compare", au, xa, 0, X * GiB // BLOCK, xblocks, 32)
        o["xcopy_within"] = r
        o["xcopy_within_progress"] = progress
        log(f"lacuna xcopy within the LUN: {r if r else f'not finished after {args.xcopy_timeout} s'}; {len(progress)} commands done")
    finally:
        for d in reversed(daemons):
            d.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    minutes = (time.time() - started) / 60
    text = report(args, info, fills, res, off, minutes)
    print(text)
    if not args.no_record:
        with open(os.path.join(ROOT, "bench", "RESULTS.md"), "a") as f:
            f.write(text)


def offload_cell(r, gib=None):
    """A cell for one offload result."""
    if r is None:
        return "—"
    if not r["supported"]:
        return f"rejected: {r['sense']}"
    cmds = f"{r['commands']} command{'s' if r['commands'] != 1 else ''}"
    if "descriptors" in r:
        cmds += f", {r['descriptors']} descriptor{'s' if r['descriptors'] != 1 else ''}"
    if "segments" in r:
        cmds += f" / {r['segments']} segments of {r['segment_bytes'] / MiB:.0f} MiB"
    cell = f"**{fmt_s(r['seconds'])}** ({cmds}; then SYNCHRONIZE CACHE {fmt_s(r['sync_seconds'])})"
    if r.get("zero") is False:
        cell += f"; **GOOD status, but the data is still there** ({r['zero_error']})"
    elif r.get("zero"):
        cell += "; reads back zero"
    if "check" in r:
        cell += f"; {r['check']['equal']} samples of 1 MiB equal"
    return cell


def median_run(runs, key):
    """The run whose `key` is the median (the lower middle one of an even count)."""
    ordered = sorted(runs, key=lambda r: r[key])
    return ordered[(len(ordered) - 1) // 2]


def cpu_table(res):
    """What each I/O costs in CPU, and what 1.5 × tgt would leave Lacuna to spend: whether a
    target is within reach of any target on this machine, or bound by it."""
    cores = os.cpu_count()
    lines = ["### CPU per I/O (median runs; client and target share the cores)\n",
             f"CPU seconds of the client and of the target daemon (until it is idle again after the job) per I/O. "
             f"At queue depth 4 and 32 the cores are the limit: 1.5 × tgt leaves the target "
             f"{cores} cores ÷ (1.5 × tgt's rate) less the client's own CPU per I/O, with every core busy all the "
             f"time. At queue depth 1 the round trip is the limit: 1.5 × tgt needs a mean latency of tgt's ÷ 1.5. "
             f"tgt null shows what tgt's transport alone costs.\n",
             "| job | lacuna: client / target CPU | tgt | tgt null | 1.5 × tgt leaves the target | tgt null (its transport alone) spends |",
             "|---|---|---|---|---|---|"]
    for name, mode, bs, qd in JOBS:
        key = "iops" if bs == 4096 else "mib_s"
        l, t, n = (median_run(res[(name, who)], key) for who in ("lacuna", "tgt", "tgt-null"))

        def cpu(r):
            return f"{r['client_us_per_io']:.1f} / {r['daemon_us_per_io']:.1f} µs"

        if qd == 1:
            allowed = f"≤ {t['mean_lat_us'] / 1.5:.1f} µs round trip (lacuna: {l['mean_lat_us']:.1f})"
            needs = f"{n['mean_lat_us']:.1f} µs round trip"
        else:
            budget = cores * 1e6 / (1.5 * t["iops"]) - l["client_us_per_io"]
            allowed = f"≤ {budget:.1f} µs CPU (lacuna: {l['daemon_us_per_io']:.1f})"
            needs = f"{n['daemon_us_per_io']:.1f} µs CPU"
        lines.append(f"| {name} | {cpu(l)} | {cpu(t)} | {cpu(n)} | {allowed} | {needs} |")
    lines.append("")
    return lines


def report(args, info, fills, res, off, minutes):
    X, Z, F, T = args.xcopy_gib, args.zero_gib, args.fallback_gib, args.tgt_ws_gib
    L, G = off["lacuna"], off["tgt"]
    lines = []
    cmd = (f"bench/iscsi_compare.py --runtime {args.runtime} --reps {args.reps} --size-gib {args.size_gib} --xcopy-gib {X} "
           f"--zero-gib {Z} --fallback-gib {F} --tgt-ws-gib {T} --xcopy-timeout {args.xcopy_timeout}")
    lines.append(f"\n## {datetime.date.today().isoformat()} — iSCSI: `{cmd}`\n")
    rev = os.environ.get("LACUNA_REV")
    tgt_version = run(["tgtd", "--version"], ok=(0, 1)).stdout.strip() or "?"
    lines.append(f"Machine: {os.cpu_count()} cores, {os.uname().release}, "
                 f"{os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / GiB:.0f} GiB RAM; the client and both "
                 f"targets share the cores; Lacuna's data directory and tgt's backing files on the same ext4 disk "
                 f"under $BENCH_DIR. Lacuna{f' built from `{rev}`' if rev else ''} (`lacuna serve --iscsi-open-access "
                 f"--capacity 1T`); tgt {tgt_version} (`tgtd`, file backstore `--bstype rdwr`, sparse files). "
                 f"Client: a libiscsi 1.19 initiator compiled by the script (one session, no digests). "
                 f"Run time {minutes:.1f} min.\n")
    lines.append(f"### Throughput ({args.size_gib} GiB LUN of each, {args.runtime} s per job, median of {args.reps} runs)\n")
    lines.append(f"Both LUNs are first written end to end with the same data (1 MiB writes at QD8, then SYNCHRONIZE "
                 f"CACHE; ~2:1 compressible 4 KiB blocks, ~30% of them duplicates from a pool of 64). Writes carry fresh "
                 f"data of the same kind; no FLUSH inside a job. Before every job the script waits until both daemons "
                 f"are idle and the kernel holds < 64 MiB of dirty pages; the targets alternate run by run, each job runs "
                 f"{args.reps} times on each, and each cell is the median run (its mean latency, then the range of "
                 f"all runs). "
                 f"\"tgt null\" is tgt's null backstore (LUN 3, `--bstype null`): tgt's transport with no "
                 f"storage work at all.\n")
    lines.append("| job | lacuna | tgt | lacuna ÷ tgt | ≥ 1.5 | tgt null (no storage) | tgt null ÷ tgt |")
    lines.append("|---|---|---|---|---|---|---|")
    fl, ft = fills["lacuna"], fills["tgt"]
    lines.append(f"| prefill {args.size_gib} GiB, 1M write QD8 + SYNCHRONIZE CACHE | "
                 f"{args.size_gib * 1024 / fl['seconds']:.0f} MiB/s | {args.size_gib * 1024 / ft['seconds']:.0f} MiB/s | "
                 f"{ft['seconds'] / fl['seconds']:.2f} | (not a target) | — | — |")
    ratios = []
    for name, mode, bs, qd in JOBS:
        key = "iops" if bs == 4096 else "mib_s"
        unit = "IOPS" if bs == 4096 else "MiB/s"
        l, t, n = (median_run(res[(name, who)], key) for who in ("lacuna", "tgt", "tgt-null"))
        ratio = l[key] / t[key]
        null_ratio = n[key] / t[key]
        ratios.append((name, ratio, null_ratio))

        def cell(who, r):
            values = [run[key] for run in res[(name, who)]]
            spread = f"; {min(values):.0f}–{max(values):.0f}" if len(values) > 1 else ""
            return f"{r[key]:.0f} {unit} ({r['mean_lat_us']:.0f} µs{spread})"

        lines.append(f"| {name} | {cell('lacuna', l)} | {cell('tgt', t)} | {ratio:.2f} | "
                     f"{'met' if ratio >= 1.5 else '**not met**'} | {cell('tgt-null', n)} | {null_ratio:.2f} |")
    lines.append("")
    lines.extend(cpu_table(res))
    li, ti = info["lacuna-offload"], info["tgt-offload"]
    lines.append(f"### Offloads issued by the client (EXTENDED COPY of {X} GiB written, zeroing {Z} GiB)\n")
    lines.append(
        f"Lacuna: four thin {max(2 * X, Z)} GiB volumes (LUNs 1–4). The client writes [0, {X} GiB) of LUN 1 (1 MiB "
        f"writes at QD8, then SYNCHRONIZE CACHE: {L['fill']['seconds']:.0f} s) and copies it with EXTENDED COPY (LID1, "
        f"identification CSCDs E4h naming the LUNs by their VPD 83h NAA designator, block→block segments 02h) to "
        f"LUN 2 and LUN 4 in the largest commands the copy manager allows (RECEIVE COPY RESULTS: "
        f"{li.get('max_segments')} segments a command, {li.get('max_segment_bytes', 0) / MiB:.0f} MiB a segment, but "
        f"a LID1 segment counts at most 65535 blocks: 65528 blocks of 512 B, 32 MiB less 4 KiB, whole 4 KiB), and to LUN 3 in 4 MiB commands of one segment (ESXi's default "
        f"transfer size); 32 samples of 1 MiB of each copy (first, last, random) are compared with the source. Then "
        f"WRITE SAME (16) of a zero block with UNMAP over [0, {Z} GiB) of LUN 2, without UNMAP over LUN 3, and UNMAP "
        f"of LUN 4, each in as few commands as VPD B0h allows (MAXIMUM WRITE SAME LENGTH "
        f"{li['max_write_same_blocks']} blocks, MAXIMUM UNMAP LBA COUNT {li['max_unmap_blocks']}), and the copied "
        f"data is checked to read zero (32 samples over the copy, 8 over the range). Last, EXTENDED COPY within LUN 1, "
        f"[0, {X} GiB) to [{X} GiB, {2 * X} GiB), allowed {args.xcopy_timeout} s. Every operation starts with both "
        f"daemons idle.\n")
    lines.append(
        f"tgt: one thin_provisioning=1 LUN of {max(2 * X, Z)} GiB (sparse file). Standard INQUIRY 3PC = "
        f"{ti['tpc']} (Lacuna: {li['tpc']}); RECEIVE COPY RESULTS: {ti.get('copy_results_sense', 'accepted')}. With no "
        f"copy manager the client's EXTENDED COPY is tried once, and the copy a host then does itself (READ + WRITE, "
        f"1 MiB at QD8, then SYNCHRONIZE CACHE) is timed over {F} GiB and scaled to {X} GiB. The zeroing commands run "
        f"over [0, {Z} GiB) with [0, {F} GiB) written first, as tgt's VPD B0h advertises (MAXIMUM UNMAP LBA COUNT "
        f"{ti['max_unmap_blocks']}, no MAXIMUM WRITE SAME LENGTH), and, when that fails or leaves the data, again in "
        f"1 GiB commands or descriptors. tgt's WRITE SAME without UNMAP writes every block (one pwrite per 512 B "
        f"block) and would need {Z} GiB of real disk, so it runs over {T} GiB only and is scaled to {Z} GiB.\n")
    lines.append("| operation | lacuna | tgt |")
    lines.append("|---|---|---|")
    hc = G["hostcopy"]
    host_rate = hc["bytes"] / hc["seconds"]
    lines.append(f"| EXTENDED COPY {X} GiB to another LUN, largest commands | {offload_cell(L['xcopy_other'])} | "
                 f"{offload_cell(G['xcopy'])} |")
    lines.append(f"| same, again to a third LUN | {offload_cell(L['xcopy_other2'])} | — |")
    lines.append(f"| EXTENDED COPY {X} GiB to another LUN, 4 MiB commands (ESXi default) | {offload_cell(L['xcopy_esxi'])} "
                 f"| — |")
    w = L["xcopy_within"]
    if w is None:
        prog = L["xcopy_within_progress"]
        done = prog[-1].split(",")[1].strip() if prog else "0 bytes copied"
        within = (f"**did not finish in {args.xcopy_timeout} s** ({len(prog)} commands completed, {done}; the daemon "
                  f"then kept a core busy and was stopped)")
    else:
        within = offload_cell(w)
    lines.append(f"| EXTENDED COPY {X} GiB within one LUN, largest commands | {within} | — |")
    lines.append(f"| copy without EXTENDED COPY: host READ + WRITE | — | {F} GiB in {hc['seconds']:.2f} s "
                 f"({host_rate / MiB:.0f} MiB/s): **{X} GiB ≈ {X * GiB / host_rate:.0f} s** (scaled) |")
    for key, label in (("ws_unmap", f"WRITE SAME (16) zero block, UNMAP=1, {Z} GiB"),
                       ("unmap", f"UNMAP {Z} GiB")):
        for variant in ("advertised", "1 GiB"):
            lr, tr = L.get(f"{key}:{variant}"), G.get(f"{key}:{variant}")
            if lr is None and tr is None:
                continue
            what = "as advertised" if variant == "advertised" else "in 1 GiB commands/descriptors"
            lines.append(f"| {label}, {what} | {offload_cell(lr)} | {offload_cell(tr)} |")
    wz = G["ws_zero"]
    wz_rate = wz["bytes"] / wz["seconds"]
    lines.append(f"| WRITE SAME (16) zero block, UNMAP=0 (zero data), {Z} GiB | {offload_cell(L['ws_zero:advertised'])} | "
                 f"{T} GiB in {wz['seconds']:.2f} s ({wz_rate / MiB:.0f} MiB/s, {wz['commands']} commands): "
                 f"**{Z} GiB ≈ {Z * GiB / wz_rate:.0f} s** (scaled) |")
    lines.append("")
    lines.append("### Targets\n")
    lines.append("| target | measured | met |")
    lines.append("|---|---|---|")
    for name, ratio, null_ratio in ratios:
        why = "" if ratio >= 1.5 or null_ratio >= 1.5 else f" (tgt with no storage at all: {null_ratio:.2f} ×)"
        lines.append(f"| {name}: Lacuna ≥ 1.5 × tgt | {ratio:.2f} ×{why} | {'met' if ratio >= 1.5 else '**not met**'} |")
    scale = "" if X == 50 else f" (run at {X} GiB, not 50)"
    for key, label in (("xcopy_other", "to another LUN"), ("xcopy_esxi", "to another LUN, 4 MiB commands"),
                       ("xcopy_within", "within one LUN")):
        r = L[key]
        ok = r is not None and r["seconds"] < 1
        lines.append(f"| EXTENDED COPY of {X} GiB written {label}: milliseconds (< 1 s){scale} | "
                     f"{fmt_s(r['seconds']) if r else f'not finished in {args.xcopy_timeout} s'} | "
                     f"{'met' if ok else '**not met**'} |")
    zscale = "" if Z == 100 else f" (run at {Z} GiB, not 100)"
    for key, label in (("ws_unmap:advertised", "WRITE SAME with UNMAP"), ("ws_zero:advertised", "WRITE SAME zero data"),
                       ("unmap:advertised", "UNMAP")):
        r = L[key]
        ok = r["supported"] and r["zero"] and r["seconds"] < 1
        lines.append(f"| {label} zeroing {Z} GiB: milliseconds (< 1 s){zscale} | {fmt_s(r['seconds'])} "
                     f"(+ SYNCHRONIZE CACHE {fmt_s(r['sync_seconds'])}) | {'met' if ok else '**not met**'} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
