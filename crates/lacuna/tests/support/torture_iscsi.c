/* torture-iscsi: a synchronous libiscsi initiator the torture workload drives over
 * a pipe, so the iSCSI side of the crash test goes through a real initiator stack.
 *
 * usage: torture-iscsi ISCSI-URL INITIATOR-IQN
 *
 * stdin carries requests of a 16-byte header, little endian:
 *   u8 op, u8 fua, u16 zero, u32 blocks, u64 lba
 * followed, for op 'W', by blocks * 512 bytes of data. Ops: 'W' WRITE(16) (FUA bit
 * from the header), 'U' UNMAP of one descriptor, 'Z' WRITE SAME(16) of a zero block
 * without UNMAP, 'F' SYNCHRONIZE CACHE(16) of the whole LUN. After each command
 * completed with GOOD status one byte 0 is written to stdout. Any other outcome
 * (transport error, CHECK CONDITION other than UNIT ATTENTION) exits with status 2
 * and a message on stderr: the daemon was killed, or the target refused.
 * A UNIT ATTENTION means the command was not executed, so it is retried (bounded).
 * libiscsi's automatic reconnection is off: after the daemon is killed a command
 * fails instead of being replayed on a new session.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>

#define BLOCK_BYTES 512
#define MAX_BLOCKS 4096 /* 2 MiB per request */
#define UA_RETRIES 16

static void die(const char *what, struct iscsi_context *iscsi)
{
	fprintf(stderr, "torture-iscsi: %s: %s\n", what, iscsi ? iscsi_get_error(iscsi) : "");
	exit(2);
}

static void read_full(void *buf, size_t len)
{
	size_t done = 0;
	while (done < len) {
		ssize_t n = read(0, (char *)buf + done, len - done);
		if (n == 0)
			exit(0); /* the workload closed the pipe */
		if (n < 0)
			die("reading stdin", NULL);
		done += (size_t)n;
	}
}

static uint64_t le(const unsigned char *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: torture-iscsi ISCSI-URL INITIATOR-IQN\n");
		return 1;
	}
	/* Dies with the workload that drives it (the test kills that one). */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() == 1)
		die("parent gone", NULL);
	struct iscsi_context *iscsi = iscsi_create_context(argv[2]);
	if (iscsi == NULL)
		die("iscsi_create_context", NULL);
	/* A lost connection is the daemon's death: fail, never log in again. */
	iscsi_set_noautoreconnect(iscsi, 1);
	struct iscsi_url *url = iscsi_parse_full_url(iscsi, argv[1]);
	if (url == NULL)
		die("parsing the URL", iscsi);
	iscsi_set_targetname(iscsi, url->target);
	iscsi_set_session_type(iscsi, ISCSI_SESSION_NORMAL);
	iscsi_set_header_digest(iscsi, ISCSI_HEADER_DIGEST_NONE);
	if (iscsi_full_connect_sync(iscsi, url->portal, url->lun) != 0)
		die("login", iscsi);
	int lun = url->lun;
	iscsi_destroy_url(url);
	static unsigned char data[MAX_BLOCKS * BLOCK_BYTES];
	static unsigned char zero[BLOCK_BYTES];
	for (;;) {
		unsigned char header[16];
		read_full(header, sizeof header);
		int op = header[0], fua = header[1];
		uint32_t blocks = (uint32_t)le(header + 4, 4);
		uint64_t lba = le(header + 8, 8);
		if (blocks > MAX_BLOCKS)
			die("request too large", NULL);
		if (op == 'W')
			read_full(data, (size_t)blocks * BLOCK_BYTES);
		for (int attempt = 0;; attempt++) {
			struct scsi_task *t = NULL;
			struct unmap_list range = {.lba = lba, .num = blocks};
			switch (op) {
			case 'W':
				t = iscsi_write16_sync(iscsi, lun, lba, data, blocks * BLOCK_BYTES, BLOCK_BYTES, 0, 0,
						       fua, 0, 0);
				break;
			case 'U':
				t = iscsi_unmap_sync(iscsi, lun, 0, 0, &range, 1);
				break;
			case 'Z':
				t = iscsi_writesame16_sync(iscsi, lun, lba, zero, BLOCK_BYTES, blocks, 0, 0, 0, 0);
				break;
			case 'F':
				t = iscsi_synchronizecache16_sync(iscsi, lun, 0, 0, 0, 0);
				break;
			default:
				die("unknown op", NULL);
			}
			if (t == NULL)
				die("command", iscsi);
			int status = t->status;
			int ua = status == SCSI_STATUS_CHECK_CONDITION && t->sense.key == SCSI_SENSE_UNIT_ATTENTION;
			if (status != SCSI_STATUS_GOOD && !(ua && attempt < UA_RETRIES)) {
				fprintf(stderr, "torture-iscsi: op %c lba %" PRIu64 " blocks %u: status 0x%x sense %s\n",
					op, lba, blocks, status, scsi_sense_key_str(t->sense.key));
				exit(2);
			}
			scsi_free_scsi_task(t);
			if (!ua)
				break;
		}
		if (write(1, "", 1) != 1)
			die("writing stdout", NULL);
	}
}
