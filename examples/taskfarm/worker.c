/*
 * taskfarm_worker: one task of the task farm (the "worker procedure" of
 * OmniStorage's Figure 3), started by taskfarm_master.
 *
 *   taskfarm_worker PREFIX TASK INIT_SIZE RESULT_SIZE
 *
 * Talks to the daemon of its host: the library's default socket
 * ($OMST_SOCKET, which the master sets per worker). With the handle API:
 *   1. omst_connect; omst_get_start(PREFIX/init): the initial data starts
 *      coming (Figure 3's OmstGetData at the top of the procedure, made
 *      asynchronous);
 *   2. meanwhile the task's own setup, which does not need the data (a key
 *      table from the task parameter), polling omst_test between slices;
 *   3. omst_wait; verify the initial data; compute the result from it and
 *      the key table;
 *   4. omst_put(PREFIX/result/TASK): the result stays in the tree (this
 *      worker, its head), the master later reads it by name.
 * Prints one line; exit status 0 only if every step succeeded.
 */
#define _POSIX_C_SOURCE 200809L
#include "taskfarm.h"

#include <omst.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int task = -1;

static int fail(const char *what, const char *name, int rc)
{
	const char *msg = omst_errmsg();
	fprintf(stderr, "taskfarm_worker: task %d: %s %s: %s%s%s\n", task, what, name, omst_strerror(rc),
	        msg && *msg ? ": " : "", msg ? msg : "");
	return 1;
}

static int parse_size(const char *s, size_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end || v == 0 || v % 8 != 0 || v > (1ull << 34))
		return -1;
	*out = (size_t)v;
	return 0;
}

int main(int argc, char **argv)
{
	size_t init_size, result_size;
	if (argc != 5 || (task = atoi(argv[2])) < 0 || parse_size(argv[3], &init_size) != 0 ||
	    parse_size(argv[4], &result_size) != 0) {
		fprintf(stderr, "usage: taskfarm_worker PREFIX TASK INIT_SIZE RESULT_SIZE (sizes: multiples of 8)\n");
		return 2;
	}
	const char *prefix = argv[1];
	char init_name[OMST_NAME_MAX + 1], result_name[OMST_NAME_MAX + 1];
	snprintf(init_name, sizeof init_name, "%s/init", prefix);
	snprintf(result_name, sizeof result_name, "%s/result/%d", prefix, task);
	const char *sock = getenv("OMST_SOCKET");
	double t_start = tf_now();

	unsigned char *data = malloc(init_size), *res = malloc(result_size);
	size_t nkeys = result_size / 8;
	uint64_t *keys = malloc(nkeys * sizeof *keys);
	if (!data || !res || !keys) {
		fprintf(stderr, "taskfarm_worker: task %d: out of memory\n", task);
		return 1;
	}

	omst_t *h;
	int rc = omst_connect(NULL, &h);
	if (rc != OMST_OK)
		return fail("omst_connect", sock ? sock : "(default socket)", rc);

	/* Was the initial data already on this host (an earlier task here
	 * fetched it)? Only for the report. */
	omst_info_t info;
	int was_local = omst_stat(h, init_name, &info) == OMST_OK && (info.flags & OMST_INFO_LOCAL);

	/* 1. Start fetching the initial data. */
	omst_req_t *req;
	rc = omst_get_start(h, init_name, data, init_size, &req);
	if (rc != OMST_OK)
		return fail("omst_get_start", init_name, rc);

	/* 2. The setup that does not need it, overlapped with the fetch. */
	int done = 0;
	double t_fetched = 0;
	for (size_t j = 0; j < nkeys; j++) {
		keys[j] = tf_key(task, j);
		if (!done && (j % 4096 == 4095 || j == nkeys - 1)) {
			if ((rc = omst_test(req, &done)) != OMST_OK) {
				omst_wait(req, NULL);
				return fail("omst_test", init_name, rc);
			}
			if (done)
				t_fetched = tf_now();
		}
	}
	int during_setup = done;

	/* 3. Wait for the data, check it, compute. */
	rc = omst_wait(req, &info);
	if (rc != OMST_OK)
		return fail("omst_wait (get)", init_name, rc);
	if (!done)
		t_fetched = tf_now();
	if (info.size != init_size) {
		fprintf(stderr, "taskfarm_worker: task %d: %s has size %llu, want %zu\n", task, init_name,
		        (unsigned long long)info.size, init_size);
		return 1;
	}
	size_t bad = tf_check_init(data, init_size);
	if (bad != (size_t)-1) {
		fprintf(stderr, "taskfarm_worker: task %d: %s wrong at byte %zu\n", task, init_name, bad * 8);
		return 1;
	}
	uint64_t sum = tf_checksum(data, init_size, task);
	for (size_t j = 0; j < nkeys; j++)
		tf_put64(res + 8 * j, tf_result_word(sum, keys[j]));

	/* 4. Publish the result. */
	double t_put = tf_now();
	rc = omst_put(h, result_name, res, result_size, &info);
	if (rc != OMST_OK)
		return fail("omst_put", result_name, rc);
	double t_end = tf_now();
	omst_close(h);

	printf("  task %d (pid %d) via %s: init %s, fetched in %.3f s (%s), result %s put in %.3f s, %.3f s in all\n",
	       task, (int)getpid(), sock ? sock : "(default socket)",
	       was_local ? "already local" : "fetched through the tree", t_fetched - t_start,
	       during_setup ? "before the key setup ended" : "the key setup overlapped it",
	       result_name, t_end - t_put, t_end - t_start);
	free(data);
	free(res);
	free(keys);
	return 0;
}
