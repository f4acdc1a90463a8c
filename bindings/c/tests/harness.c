/* harness.c: the test runner and helpers (see harness.h). */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *t_sock, *t_home, *t_tmp, *t_omst_bin;
static int failures;
static const char *cur_test = "";

void t_fail(const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	__atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST);
	fprintf(stderr, "    %s: %s:%d: ", cur_test, file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void t_skip(const char *why)
{
	fprintf(stderr, "    %s: SKIPPED: %s\n", cur_test, why);
	/* make test's last line lists every part that did not run (OMST_SKIPS,
	 * see the Makefile): a skipped test never passes for a passed one. */
	const char *path = getenv("OMST_SKIPS");
	if (path && *path) {
		FILE *f = fopen(path, "a");
		if (f) {
			fprintf(f, "ctest %s: %s\n", cur_test, why);
			fclose(f);
		}
	}
}

int t_failures(void)
{
	return __atomic_load_n(&failures, __ATOMIC_SEQ_CST);
}

void t_log(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "    %s: ", cur_test);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void t_fill(void *buf, size_t n, uint32_t seed)
{
	uint64_t x = 0x9E3779B97F4A7C15ull ^ seed;
	uint8_t *p = buf;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		memcpy(p + i, &x, 8);
	}
	x ^= x << 13, x ^= x >> 7, x ^= x << 17;
	for (; i < n; i++)
		p[i] = (uint8_t)(x >> (8 * (i % 8)));
}

void *t_pattern(size_t n, uint32_t seed)
{
	void *p = malloc(n ? n : 1);
	if (p == NULL) {
		fprintf(stderr, "out of memory\n");
		exit(2);
	}
	t_fill(p, n, seed);
	return p;
}

double t_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

const char *t_name(const char *prefix)
{
	static __thread char buf[256];
	static int counter;
	snprintf(buf, sizeof buf, "%s/%d/%d", prefix, (int)getpid(), __atomic_add_fetch(&counter, 1, __ATOMIC_SEQ_CST));
	return buf;
}

/* Runs one test in a child; returns 1 if it passed. */
static int run_one(const struct test *t)
{
	double t0 = t_now();
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return 0;
	}
	if (pid == 0) {
		cur_test = t->name;
		alarm((unsigned)(t->timeout_s ? t->timeout_s : 120));
		t->fn();
		fflush(NULL);
		exit(t_failures() ? 1 : 0); /* exit, not _exit: runs the leak checker of -fsanitize builds */
	}
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
	if (WIFSIGNALED(st))
		fprintf(stderr, "    %s: killed by signal %d%s\n", t->name, WTERMSIG(st),
		        WTERMSIG(st) == SIGALRM ? " (timeout)" : "");
	printf("%s %s (%.2fs)\n", ok ? "ok  " : "FAIL", t->name, t_now() - t0);
	fflush(stdout);
	return ok;
}

int t_run(const struct test *tests, size_t n)
{
	const char *only = getenv("OMST_TEST_RUN");
	int passed = 0, failed = 0;
	for (size_t i = 0; i < n; i++) {
		if (only && *only && strstr(tests[i].name, only) == NULL)
			continue;
		if (run_one(&tests[i]))
			passed++;
		else
			failed++;
	}
	printf("%d passed, %d failed\n", passed, failed);
	fflush(stdout);
	return failed ? 1 : 0;
}

int t_count_fds(void)
{
	int n = 0;
	for (int fd = 0; fd < 4096; fd++)
		if (fcntl(fd, F_GETFD) >= 0)
			n++;
	return n;
}

int t_count_fds_settled(int want)
{
	/* In-process fake daemons close their ends a moment after the client. */
	int n = t_count_fds();
	for (int i = 0; i < 200 && n > want; i++) {
		usleep(10000);
		n = t_count_fds();
	}
	return n;
}
