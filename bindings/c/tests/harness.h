/*
 * harness.h: a tiny test runner. Each test runs in a child process of its
 * own (a crash or hang fails that test only); checks record failures; the
 * runner's last line is "N passed, N failed".
 */
#ifndef OMST_TEST_HARNESS_H
#define OMST_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "omst.h"

struct test {
	const char *name;
	void (*fn)(void);
	int timeout_s; /* 0: 120 */
};

/* Set by the runner for the tests. */
extern const char *t_sock;     /* the test daemon's socket */
extern const char *t_home;     /* its home directory */
extern const char *t_tmp;      /* a scratch directory for the tests */
extern const char *t_omst_bin; /* the omst binary */

void t_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int t_failures(void);
/* Records that the current test could not run here (why), on stderr and in
 * $OMST_SKIPS; the caller returns. */
void t_skip(const char *why);
void t_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define CHECK(cond)                                                      \
	do {                                                             \
		if (!(cond))                                             \
			t_fail(__FILE__, __LINE__, "check failed: %s", #cond); \
	} while (0)

/* Checks a call's return code; on a mismatch prints the code's meaning
 * and the thread's message. */
#define CHECK_RC(call, want)                                                              \
	do {                                                                              \
		int r_ = (call), w_ = (want);                                             \
		if (r_ != w_)                                                             \
			t_fail(__FILE__, __LINE__, "%s = %d (%s: %s), want %d (%s)", #call, r_, \
			       omst_strerror(r_), omst_errmsg(), w_, omst_strerror(w_));  \
	} while (0)

#define CHECK_EQ_U(a, b)                                                                        \
	do {                                                                                    \
		unsigned long long a_ = (unsigned long long)(a), b_ = (unsigned long long)(b); \
		if (a_ != b_)                                                                   \
			t_fail(__FILE__, __LINE__, "%s = %llu, want %s = %llu", #a, a_, #b, b_); \
	} while (0)

/* Deterministic bytes for seed. */
void t_fill(void *buf, size_t n, uint32_t seed);
void *t_pattern(size_t n, uint32_t seed); /* malloc'd t_fill */
double t_now(void);
int t_count_fds(void);                     /* open descriptors */
int t_count_fds_settled(int want);         /* the same, waiting up to 2 s for want */                       /* seconds, monotonic */
/* A name unique in this run: prefix/pid/counter. */
const char *t_name(const char *prefix);

/* daemon.c: a real daemon in a fresh home. */
struct t_daemon {
	int pid;
	char home[256];
	char sock[320];
};
int t_daemon_start(struct t_daemon *d);
/* The same with more arguments for `omst daemon` (NULL-terminated). */
int t_daemon_start_with(struct t_daemon *d, const char *const *extra);
void t_daemon_stop(struct t_daemon *d);
void t_daemon_kill(struct t_daemon *d); /* SIGKILL, reap; home kept */

/* vectors.c */
void test_vectors(void);

int t_run(const struct test *tests, size_t n);

#endif
