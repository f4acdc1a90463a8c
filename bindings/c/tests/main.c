/*
 * main.c: libomst tests against a real omst daemon that the runner starts
 * ($OMST_BIN, default ../../bin/omst) in a fresh home, plus fake daemons
 * (fake.c) for failures a real one does not produce on demand. The last
 * line of the output is "N passed, N failed".
 */
#include "harness.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MiB (1u << 20)

static omst_t *must_connect(void)
{
	omst_t *h = NULL;
	CHECK_RC(omst_connect(t_sock, &h), 0);
	if (h == NULL) {
		t_fail(__FILE__, __LINE__, "cannot go on without a connection");
		exit(1);
	}
	return h;
}

static void use_default_socket(void)
{
	setenv("OMST_SOCKET", t_sock, 1);
}

static int daemon_has_v2(void)
{
	/* A version 2 daemon answers HELLO 2 with HELLO 2. */
	struct omst_conn *c;
	if (conn_open(t_sock, 5000, 2, &c) != 0)
		return 0;
	int v = (int)c->version;
	conn_close(c);
	return v >= 2;
}

#define count_open_fds t_count_fds

/* ---- unit tests (no daemon) ------------------------------------------- */

static void test_names(void)
{
	static const char *good[] = {"a", "a/b/c", "données/été", "a.b", "...", ".a", "a..", "x y", "日本/語", "\xf0\x9f\x98\x80"};
	static const char *bad[] = {"", "/a", "a/", "a//b", ".", "..", "a/./b", "a/../b", "a/..", "./a",
	                            "ctl\x01", "tab\tx", "del\x7f", "c1\xc2\x80", "c1\xc2\x9f", "bad\xff",
	                            "\xc0\xaf", "\xed\xa0\x80", "\xe0\x80\xaf", "\xf4\x90\x80\x80", "trunc\xe2\x82", "/"};
	size_t n;
	for (size_t i = 0; i < sizeof good / sizeof *good; i++)
		CHECK_RC(omst_check_name(good[i], &n), 0);
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		int r = omst_check_name(bad[i], &n);
		if (r != OMST_EINVALIDNAME)
			t_fail(__FILE__, __LINE__, "name #%zu \"%s\": %d, want OMST_EINVALIDNAME", i, bad[i], r);
	}
	CHECK_RC(omst_check_name(NULL, &n), OMST_EINVAL);
	char longname[OMST_NAME_MAX + 2];
	memset(longname, 'x', sizeof longname);
	longname[OMST_NAME_MAX] = '\0';
	CHECK_RC(omst_check_name(longname, &n), 0);
	CHECK_EQ_U(n, OMST_NAME_MAX);
	longname[OMST_NAME_MAX] = 'x';
	longname[OMST_NAME_MAX + 1] = '\0';
	CHECK_RC(omst_check_name(longname, &n), OMST_EINVALIDNAME);
	CHECK(strlen(omst_errmsg()) > 0);
}

static void test_strerror(void)
{
	int codes[] = {OMST_OK, OMST_ENOTFOUND, OMST_EINVALIDNAME, OMST_EBADREQUEST, OMST_EIO, OMST_ENOSPACE,
	               OMST_EUNREACHABLE, OMST_ECORRUPT, OMST_ESIZE, OMST_EVERSION, OMST_EINTERNAL, OMST_EABORTED,
	               OMST_ETIMEDOUT, OMST_EUNAVAILABLE, OMST_EFORBIDDEN, OMST_EINVAL, OMST_ENODAEMON, OMST_ECONN, OMST_EPROTO, OMST_ENOMEM,
	               OMST_ESYS, OMST_EMFILE, OMST_EUNKNOWN, 12345};
	for (size_t i = 0; i < sizeof codes / sizeof *codes; i++) {
		const char *s = omst_strerror(codes[i]);
		CHECK(s != NULL && *s != '\0');
	}
	CHECK(omst_code_from_wire(1) == OMST_ENOTFOUND);
	CHECK(omst_code_from_wire(12) == OMST_ETIMEDOUT);
	CHECK(omst_code_from_wire(13) == OMST_EUNAVAILABLE);
	CHECK(omst_code_from_wire(14) == OMST_EFORBIDDEN);
	CHECK(omst_code_from_wire(15) == OMST_EUNKNOWN);
	CHECK(omst_code_from_wire(0) == OMST_EUNKNOWN);
}

/* ---- argument checks -------------------------------------------------- */

static void test_null_args(void)
{
	omst_t *h = must_connect();
	omst_info_t info;
	omst_buf_t *b = (omst_buf_t *)&info; /* must be reset to NULL on failure */
	omst_req_t *r;
	char buf[16];
	int done;
	use_default_socket();

	CHECK_RC(omst_connect(t_sock, NULL), OMST_EINVAL);
	CHECK_RC(omst_put(NULL, "a", buf, 1, NULL), OMST_EINVAL);
	CHECK_RC(omst_put(h, NULL, buf, 1, NULL), OMST_EINVAL);
	CHECK_RC(omst_put(h, "a", NULL, 1, NULL), OMST_EINVAL);
	CHECK_RC(omst_put_chunked(NULL, "a", buf, 1, 0, NULL), OMST_EINVAL);
	CHECK_RC(omst_put_chunked(h, "a", buf, 1, 100, NULL), OMST_EINVAL);
	CHECK_RC(omst_put_chunked(h, "a", buf, 1, (64u << 20) + 1, NULL), OMST_EINVAL);
	CHECK_RC(omst_put_file(NULL, "a", "/etc/hostname", NULL), OMST_EINVAL);
	CHECK_RC(omst_put_file(h, NULL, "/etc/hostname", NULL), OMST_EINVAL);
	CHECK_RC(omst_put_file(h, "a", NULL, NULL), OMST_EINVAL);
	CHECK_RC(omst_put_file(h, "a", "", NULL), OMST_EINVAL);
	CHECK_RC(omst_get(NULL, "a", buf, 1, NULL), OMST_EINVAL);
	CHECK_RC(omst_get(h, NULL, buf, 1, NULL), OMST_EINVAL);
	CHECK_RC(omst_get(h, "a", NULL, 1, NULL), OMST_EINVAL);
	CHECK_RC(omst_get_file(NULL, "a", "/tmp/x", NULL), OMST_EINVAL);
	CHECK_RC(omst_get_file(h, NULL, "/tmp/x", NULL), OMST_EINVAL);
	CHECK_RC(omst_get_file(h, "a", NULL, NULL), OMST_EINVAL);
	CHECK_RC(omst_stat(NULL, "a", &info), OMST_EINVAL);
	CHECK_RC(omst_stat(h, NULL, &info), OMST_EINVAL);
	CHECK_RC(omst_stat(h, "a", NULL), OMST_EINVAL);
	CHECK_RC(omst_remove(NULL, "a"), OMST_EINVAL);
	CHECK_RC(omst_remove(h, NULL), OMST_EINVAL);
	CHECK_RC(omst_get_buf(NULL, "a", 0, &b), OMST_EINVAL);
	CHECK_RC(omst_get_buf(h, "a", 0, NULL), OMST_EINVAL);
	CHECK_RC(omst_get_buf(h, NULL, 0, &b), OMST_EINVAL);
	CHECK(b == NULL);
	CHECK_RC(omst_get_buf(h, "a", 0x100, &b), OMST_EINVAL);
	CHECK_RC(omst_get_start(NULL, "a", buf, 1, &r), OMST_EINVAL);
	CHECK_RC(omst_get_start(h, NULL, buf, 1, &r), OMST_EINVAL);
	CHECK_RC(omst_get_start(h, "a", NULL, 1, &r), OMST_EINVAL);
	CHECK_RC(omst_get_start(h, "a", buf, 1, NULL), OMST_EINVAL);
	CHECK_RC(omst_test(NULL, &done), OMST_EINVAL);
	CHECK_RC(omst_wait(NULL, NULL), OMST_EINVAL);
	CHECK(omst_buf_data(NULL) == NULL);
	CHECK(omst_buf_data_mut(NULL) == NULL);
	CHECK(omst_buf_size(NULL) == 0);
	CHECK(omst_buf_zero_copy(NULL) == 0);
	CHECK(omst_buf_info(NULL) == NULL);
	omst_buf_release(NULL);
	omst_close(NULL);
	CHECK_RC(OmstPutData(NULL, buf, 1), OMST_EINVAL);
	CHECK_RC(OmstPutData("a", NULL, 1), OMST_EINVAL);
	CHECK_RC(OmstGetData(NULL, buf, 1), OMST_EINVAL);
	CHECK_RC(OmstGetData("a", NULL, 1), OMST_EINVAL);
	CHECK_RC(OmstPutFile(NULL, "/etc/hostname"), OMST_EINVAL);
	CHECK_RC(OmstPutFile("a", NULL), OMST_EINVAL);
	CHECK_RC(OmstGetFile(NULL, "/tmp/x"), OMST_EINVAL);
	CHECK_RC(OmstGetFile("a", NULL), OMST_EINVAL);
	char longpath[W_MAX_PATH + 2];
	memset(longpath, 'p', sizeof longpath);
	longpath[0] = '/';
	longpath[W_MAX_PATH + 1] = '\0';
	CHECK_RC(omst_put_file(h, "a", longpath, NULL), OMST_EINVAL);
	/* size 0 with a NULL buffer is a valid empty put/get */
	const char *nm = t_name("null/empty");
	CHECK_RC(omst_put(h, nm, NULL, 0, NULL), 0);
	CHECK_RC(omst_get(h, nm, NULL, 0, NULL), 0);
	omst_close(h);
}

static void test_invalid_names(void)
{
	static const char *bad[] = {"", "/lead", "trail/", "a//b", ".", "..", "a/../b", "a/./b", "ctl\x01x",
	                            "nl\nx", "del\x7f", "c1\xc2\x85", "bad\xfe", "\xed\xa0\x80"};
	omst_t *h = must_connect();
	omst_info_t info;
	omst_buf_t *b;
	omst_req_t *r;
	char buf[4] = "abc";
	use_default_socket();
	char longname[OMST_NAME_MAX + 2];
	memset(longname, 'n', sizeof longname);
	longname[OMST_NAME_MAX + 1] = '\0';
	for (size_t i = 0; i <= sizeof bad / sizeof *bad; i++) {
		const char *n = i < sizeof bad / sizeof *bad ? bad[i] : longname;
		CHECK_RC(omst_put(h, n, buf, 3, &info), OMST_EINVALIDNAME);
		CHECK_RC(omst_put_chunked(h, n, buf, 3, 4096, &info), OMST_EINVALIDNAME);
		CHECK_RC(omst_put_file(h, n, "/etc/hostname", &info), OMST_EINVALIDNAME);
		CHECK_RC(omst_get(h, n, buf, 3, &info), OMST_EINVALIDNAME);
		CHECK_RC(omst_get_file(h, n, "/tmp/x", &info), OMST_EINVALIDNAME);
		CHECK_RC(omst_stat(h, n, &info), OMST_EINVALIDNAME);
		CHECK_RC(omst_remove(h, n), OMST_EINVALIDNAME);
		CHECK_RC(omst_get_buf(h, n, 0, &b), OMST_EINVALIDNAME);
		CHECK_RC(omst_get_start(h, n, buf, 3, &r), OMST_EINVALIDNAME);
		CHECK_RC(OmstPutData(n, buf, 3), OMST_EINVALIDNAME);
		CHECK_RC(OmstGetData(n, buf, 3), OMST_EINVALIDNAME);
		CHECK_RC(OmstPutFile(n, "/etc/hostname"), OMST_EINVALIDNAME);
		CHECK_RC(OmstGetFile(n, "/tmp/x"), OMST_EINVALIDNAME);
	}
	/* The longest name works. */
	longname[OMST_NAME_MAX] = '\0';
	CHECK_RC(omst_put(h, longname, buf, 3, &info), 0);
	CHECK(strcmp(info.name, longname) == 0);
	char got[3];
	CHECK_RC(omst_get(h, longname, got, 3, NULL), 0);
	CHECK(memcmp(got, buf, 3) == 0);
	CHECK_RC(omst_put(h, "données/été/日本", buf, 3, NULL), 0);
	CHECK_RC(omst_get(h, "données/été/日本", got, 3, &info), 0);
	CHECK(strcmp(info.name, "données/été/日本") == 0);
	omst_close(h);
}

/* ---- no daemon -------------------------------------------------------- */

static void test_no_daemon(void)
{
	omst_t *h = (omst_t *)1;
	char path[512];
	double t0 = t_now();
	snprintf(path, sizeof path, "%s/nothing-here.sock", t_tmp);
	CHECK_RC(omst_connect(path, &h), OMST_ENODAEMON);
	CHECK(h == NULL);
	CHECK(strstr(omst_errmsg(), path) != NULL);
	{
		/* Printed as the README prints an error, it says "no omst
		 * daemon" once (omst_strerror's), then the socket and why. */
		char line[1024];
		snprintf(line, sizeof line, "%s: %s", omst_strerror(OMST_ENODAEMON), omst_errmsg());
		const char *first = strstr(line, "no omst daemon");
		CHECK(first != NULL && strstr(first + 1, "no omst daemon") == NULL);
		CHECK(strstr(line, "No such file or directory") != NULL);
	}
	CHECK_RC(omst_connect("/nonexistent-dir/omst.sock", &h), OMST_ENODAEMON);

	/* A stale socket: bound, nobody listening. */
	snprintf(path, sizeof path, "%s/stale.sock", t_tmp);
	unlink(path);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	strcpy(sa.sun_path, path);
	CHECK(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
	close(fd);
	CHECK_RC(omst_connect(path, &h), OMST_ENODAEMON);
	unlink(path);

	/* The OmniStorage calls on a default socket with no daemon. */
	snprintf(path, sizeof path, "%s/none.sock", t_tmp);
	setenv("OMST_SOCKET", path, 1);
	char buf[8] = "1234567";
	CHECK_RC(OmstPutData("a", buf, 8), OMST_ENODAEMON);
	CHECK_RC(OmstGetData("a", buf, 8), OMST_ENODAEMON);
	CHECK_RC(OmstPutFile("a", "/etc/hostname"), OMST_ENODAEMON);
	CHECK_RC(OmstGetFile("a", "/tmp/x"), OMST_ENODAEMON);
	unsetenv("OMST_SOCKET");
	setenv("OMST_HOME", t_tmp, 1);
	CHECK_RC(omst_connect(NULL, &h), OMST_ENODAEMON);
	CHECK(t_now() - t0 < 2.0);
}

static void test_default_socket(void)
{
	omst_t *h;
	unsetenv("OMST_SOCKET");
	setenv("OMST_HOME", t_home, 1);
	CHECK_RC(omst_connect(NULL, &h), 0);
	omst_close(h);
	/* ~/.omst/omst.sock */
	unsetenv("OMST_HOME");
	char home[512], link[600];
	snprintf(home, sizeof home, "%s/home-%d", t_tmp, (int)getpid());
	mkdir(home, 0700);
	snprintf(link, sizeof link, "%s/.omst", home);
	CHECK(symlink(t_home, link) == 0);
	setenv("HOME", home, 1);
	CHECK_RC(omst_connect(NULL, &h), 0);
	omst_close(h);
	/* $OMST_SOCKET wins over $OMST_HOME. */
	setenv("OMST_HOME", "/nonexistent", 1);
	setenv("OMST_SOCKET", t_sock, 1);
	CHECK_RC(omst_connect(NULL, &h), 0);
	omst_close(h);
	char buf[5] = "hello", got[5];
	CHECK_RC(OmstPutData("default/sock", buf, 5), 0);
	CHECK_RC(OmstGetData("default/sock", got, 5), 0);
	CHECK(memcmp(buf, got, 5) == 0);
}

/* Inside a Slurm job: this node's daemon of the job, found by
 * $SLURM_JOB_ID, $SLURMD_NODENAME and $TMPDIR, without OMST_SOCKET or
 * OMST_HOME (slurm.c); those still win. */
static void test_slurm_socket(void)
{
	omst_t *h;
	char base[512], dir[600], node[700], sock[800], home[600];
	snprintf(base, sizeof base, "%s/slurm-%d", t_tmp, (int)getpid());
	snprintf(dir, sizeof dir, "%s/omst-slurm-4242", base);
	snprintf(node, sizeof node, "%s/n3", dir);
	snprintf(sock, sizeof sock, "%s/omst.sock", node);
	snprintf(home, sizeof home, "%s/nohome", base);
	CHECK(mkdir(base, 0700) == 0);
	CHECK(mkdir(dir, 0700) == 0);
	CHECK(mkdir(node, 0700) == 0);
	unsetenv("OMST_SOCKET");
	unsetenv("OMST_HOME");
	setenv("HOME", home, 1); /* no daemon there */
	setenv("TMPDIR", base, 1);
	setenv("SLURM_JOB_ID", "4242", 1);
	setenv("SLURMD_NODENAME", "n3", 1);
	/* No socket in the job's directory yet: the default, no daemon. */
	CHECK_RC(omst_connect(NULL, &h), OMST_ENODAEMON);
	CHECK(symlink(t_sock, sock) == 0);
	CHECK_RC(omst_connect(NULL, &h), 0);
	omst_close(h);
	char buf[5] = "slurm", got[5];
	CHECK_RC(OmstPutData("default/slurm", buf, 5), 0);
	CHECK_RC(OmstGetData("default/slurm", got, 5), 0);
	CHECK(memcmp(buf, got, 5) == 0);
	/* Another node's name, another job: not this one's. */
	setenv("SLURMD_NODENAME", "n4", 1);
	CHECK_RC(omst_connect(NULL, &h), OMST_ENODAEMON);
	setenv("SLURMD_NODENAME", "n3", 1);
	setenv("SLURM_JOB_ID", "4243", 1);
	CHECK_RC(omst_connect(NULL, &h), OMST_ENODAEMON);
	setenv("SLURM_JOB_ID", "../omst-slurm-4242", 1);
	CHECK_RC(omst_connect(NULL, &h), OMST_ENODAEMON);
	/* $OMST_HOME wins. */
	setenv("SLURM_JOB_ID", "4242", 1);
	setenv("OMST_HOME", home, 1);
	CHECK_RC(omst_connect(NULL, &h), OMST_ENODAEMON);
	unsetenv("OMST_HOME");
	unlink(sock);
	rmdir(node);
	rmdir(dir);
	rmdir(base);
	unsetenv("TMPDIR");
	unsetenv("SLURM_JOB_ID");
	unsetenv("SLURMD_NODENAME");
	setenv("OMST_SOCKET", t_sock, 1);
}

/* ---- round trips ------------------------------------------------------ */

static void roundtrip(omst_t *h, size_t n, uint32_t chunk)
{
	const char *nm0 = t_name("rt");
	char nm[256];
	snprintf(nm, sizeof nm, "%s-%zu", nm0, n);
	uint8_t *data = t_pattern(n, (uint32_t)n);
	omst_info_t pi, gi;
	CHECK_RC(omst_put_chunked(h, nm, data, n, chunk, &pi), 0);
	CHECK_EQ_U(pi.size, n);
	CHECK(strcmp(pi.name, nm) == 0);
	CHECK(pi.id[0] != '\0');
	uint32_t cs = chunk ? chunk : MiB;
	if (n > 0) {
		CHECK_EQ_U(pi.chunk_size, cs);
		CHECK_EQ_U(pi.chunks, (n + cs - 1) / cs);
	}
	/* guard bytes after the buffer must stay as they are */
	uint8_t *got = malloc(n + 64);
	memset(got, 0xA5, n + 64);
	CHECK_RC(omst_get(h, nm, got, n, &gi), 0);
	CHECK(memcmp(got, data, n) == 0);
	for (size_t i = n; i < n + 64; i++)
		if (got[i] != 0xA5) {
			t_fail(__FILE__, __LINE__, "get wrote past the buffer at %zu", i);
			break;
		}
	CHECK(strcmp(gi.id, pi.id) == 0);
	CHECK_EQ_U(gi.size, n);
	/* library buffers: default (zero-copy when possible) and copy */
	for (unsigned flags = 0; flags <= 1; flags++) {
		omst_buf_t *b = NULL;
		CHECK_RC(omst_get_buf(h, nm, flags, &b), 0);
		if (b) {
			CHECK_EQ_U(omst_buf_size(b), n);
			CHECK(omst_buf_data(b) != NULL);
			CHECK(memcmp(omst_buf_data(b), data, n) == 0);
			CHECK(strcmp(omst_buf_info(b)->id, pi.id) == 0);
			if (flags & OMST_BUF_COPY)
				CHECK(omst_buf_zero_copy(b) == 0);
			omst_buf_release(b);
		}
	}
	free(got);
	free(data);
}

static void test_roundtrip(void)
{
	omst_t *h = must_connect();
	size_t sizes[] = {0, 1, 100, 4095, 4096, 4097, MiB - 1, MiB, MiB + 1, 3 * MiB + 12345, 17 * MiB + 1};
	for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
		roundtrip(h, sizes[i], 0);
	roundtrip(h, 100000, 4096);
	roundtrip(h, 100000, 5000);
	roundtrip(h, 3 * MiB + 7, 64u << 20);
	omst_close(h);
}

static void test_put_overwrite(void)
{
	omst_t *h = must_connect();
	const char *nm0 = t_name("ow");
	char nm[256];
	strcpy(nm, nm0);
	uint8_t *a = t_pattern(1000, 1), *b = t_pattern(2000, 2), got[2000];
	CHECK_RC(omst_put(h, nm, a, 1000, NULL), 0);
	CHECK_RC(omst_put(h, nm, b, 2000, NULL), 0);
	CHECK_RC(omst_get(h, nm, got, 2000, NULL), 0);
	CHECK(memcmp(got, b, 2000) == 0);
	free(a);
	free(b);
	omst_close(h);
}

static void check_untouched(const uint8_t *p, size_t n, uint8_t v, int line)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != v) {
			t_fail(__FILE__, line, "buffer changed at %zu after a failed get", i);
			return;
		}
}

static void test_size_mismatch(void)
{
	omst_t *h = must_connect();
	use_default_socket();
	char nm[256], big[256];
	strcpy(nm, t_name("size/small"));
	strcpy(big, t_name("size/big"));
	uint8_t *data = t_pattern(1000, 7);
	size_t bign = 6 * MiB + 3;
	uint8_t *bigdata = t_pattern(bign, 8);
	CHECK_RC(omst_put(h, nm, data, 1000, NULL), 0);
	CHECK_RC(omst_put(h, big, bigdata, bign, NULL), 0);
	uint8_t *buf = malloc(bign + 1);
	omst_info_t info;
	for (int k = 0; k < 3; k++) {
		size_t sz[] = {999, 1001, 0};
		memset(buf, 0x5A, 1001);
		CHECK_RC(omst_get(h, nm, buf, sz[k], &info), OMST_ESIZE);
		check_untouched(buf, 1001, 0x5A, __LINE__);
		CHECK(strlen(omst_errmsg()) > 0);
	}
	/* the handle is still good (drained connection) */
	CHECK_RC(omst_get(h, nm, buf, 1000, &info), 0);
	CHECK(memcmp(buf, data, 1000) == 0);
	/* big: the connection is dropped rather than drained */
	memset(buf, 0x5A, bign + 1);
	CHECK_RC(omst_get(h, big, buf, bign - 1, NULL), OMST_ESIZE);
	CHECK_RC(omst_get(h, big, buf, bign + 1, NULL), OMST_ESIZE);
	check_untouched(buf, bign + 1, 0x5A, __LINE__);
	CHECK_RC(omst_get(h, big, buf, bign, NULL), 0);
	CHECK(memcmp(buf, bigdata, bign) == 0);
	/* OmniStorage */
	memset(buf, 0x5A, 1001);
	CHECK_RC(OmstGetData(nm, buf, 1001), OMST_ESIZE);
	CHECK_RC(OmstGetData(nm, buf, 999), OMST_ESIZE);
	check_untouched(buf, 1001, 0x5A, __LINE__);
	CHECK_RC(OmstGetData(nm, buf, 1000), 0);
	CHECK(memcmp(buf, data, 1000) == 0);
	/* async */
	omst_req_t *r;
	memset(buf, 0x5A, 1001);
	CHECK_RC(omst_get_start(h, nm, buf, 1001, &r), 0);
	CHECK_RC(omst_wait(r, NULL), OMST_ESIZE);
	check_untouched(buf, 1001, 0x5A, __LINE__);
	free(buf);
	free(data);
	free(bigdata);
	omst_close(h);
}

static void test_not_found(void)
{
	omst_t *h = must_connect();
	use_default_socket();
	const char *nm = "no/such/name";
	char buf[10];
	omst_info_t info;
	omst_buf_t *b;
	omst_req_t *r;
	char path[512];
	snprintf(path, sizeof path, "%s/nf.out", t_tmp);
	CHECK_RC(omst_get(h, nm, buf, 10, &info), OMST_ENOTFOUND);
	CHECK(strstr(omst_errmsg(), "no/such/name") != NULL);
	CHECK_RC(omst_stat(h, nm, &info), OMST_ENOTFOUND);
	CHECK_RC(omst_remove(h, nm), OMST_ENOTFOUND);
	CHECK_RC(omst_get_buf(h, nm, 0, &b), OMST_ENOTFOUND);
	CHECK_RC(omst_get_buf(h, nm, OMST_BUF_COPY, &b), OMST_ENOTFOUND);
	CHECK_RC(omst_get_file(h, nm, path, &info), OMST_ENOTFOUND);
	CHECK(access(path, F_OK) != 0);
	CHECK_RC(omst_get_start(h, nm, buf, 10, &r), 0);
	CHECK_RC(omst_wait(r, &info), OMST_ENOTFOUND);
	CHECK(strstr(omst_errmsg(), "no/such/name") != NULL);
	CHECK_RC(OmstGetData(nm, buf, 10), OMST_ENOTFOUND);
	CHECK_RC(OmstGetFile(nm, path), OMST_ENOTFOUND);
	omst_close(h);
}

static void test_stat_remove(void)
{
	omst_t *h = must_connect();
	char nm[256];
	strcpy(nm, t_name("stat"));
	size_t n = 3 * MiB + 5;
	uint8_t *data = t_pattern(n, 3);
	omst_info_t pi, si;
	CHECK_RC(omst_put(h, nm, data, n, &pi), 0);
	CHECK_RC(omst_stat(h, nm, &si), 0);
	CHECK(strcmp(si.name, nm) == 0);
	CHECK(strcmp(si.id, pi.id) == 0);
	CHECK(si.id[0] == 'b'); /* CIDv1, base32 */
	CHECK_EQ_U(si.size, n);
	CHECK_EQ_U(si.chunk_size, MiB);
	CHECK_EQ_U(si.chunks, 4);
	CHECK(si.flags & OMST_INFO_LOCAL);
	CHECK(si.origin[0] != '\0');
	int64_t now = (int64_t)time(NULL) * 1000000000;
	CHECK(si.time_ns > now - 3600LL * 1000000000 && si.time_ns < now + 3600LL * 1000000000);
	CHECK_RC(omst_remove(h, nm), 0);
	CHECK_RC(omst_stat(h, nm, &si), OMST_ENOTFOUND);
	CHECK_RC(omst_get(h, nm, data, n, NULL), OMST_ENOTFOUND);
	CHECK_RC(omst_remove(h, nm), OMST_ENOTFOUND);
	free(data);
	omst_close(h);
}

static int write_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	size_t w = fwrite(p, 1, n, f);
	return fclose(f) == 0 && w == n ? 0 : -1;
}

static uint8_t *read_file(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long l = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *p = malloc(l > 0 ? (size_t)l : 1);
	*n = fread(p, 1, (size_t)l, f);
	fclose(f);
	return p;
}

/* Job namespaces (version 6): du, a TTL and a removal everywhere of a
 * prefix, against the real daemon; bad prefixes and flags named. */
static void test_namespaces(void)
{
	omst_t *h = must_connect();
	char prefix[256], nm[300];
	snprintf(prefix, sizeof prefix, "%s/", t_name("ns"));
	uint64_t bytes = 0;
	for (int i = 0; i < 3; i++) {
		size_t n = 1000 + 100 * (size_t)i;
		uint8_t *data = t_pattern(n, (uint32_t)i + 40);
		snprintf(nm, sizeof nm, "%sr%d", prefix, i);
		CHECK_RC(omst_put(h, nm, data, n, NULL), 0);
		bytes += n;
		free(data);
	}
	omst_du_t du;
	memset(&du, 0xff, sizeof du);
	CHECK_RC(omst_du(h, prefix, &du), 0);
	CHECK_EQ_U(du.names, 3);
	CHECK_EQ_U(du.blobs, 3);
	CHECK_EQ_U(du.bytes, bytes);
	CHECK_EQ_U(du.held, bytes);
	CHECK_EQ_U(du.pinned, bytes);
	CHECK_EQ_U(du.unpinned, 0);
	CHECK_EQ_U(du.complete, 3);
	CHECK_EQ_U(du.pinned_blobs, 3);
	CHECK(strstr(omst_last_json(), "\"prefix\":") != NULL);

	omst_rule_result_t res;
	memset(&res, 0, sizeof res);
	CHECK_RC(omst_set_ttl(h, prefix, 7200ull * 1000000000ull, &res), 0);
	CHECK(res.ttl_seconds == 7200);
	CHECK_EQ_U(res.reached, 1);
	CHECK(strstr(omst_last_json(), "\"kind\":\"ttl\"") != NULL);
	CHECK_RC(omst_du(h, prefix, &du), 0);
	CHECK(strstr(omst_last_json(), "\"ttl_seconds\":7200") != NULL); /* the rule, listed */
	CHECK_RC(omst_set_ttl(h, prefix, 400ull * 24 * 3600 * 1000000000ull, NULL), OMST_EBADREQUEST);
	CHECK(strstr(omst_errmsg(), "SET_TTL") != NULL);

	memset(&res, 0, sizeof res);
	CHECK_RC(omst_remove_prefix(h, prefix, OMST_EVERYWHERE, &res), 0);
	CHECK_EQ_U(res.removed, 3);
	CHECK_EQ_U(res.reached, 1);
	CHECK_EQ_U(res.unreached, 0);
	CHECK(res.seconds >= 0 && res.seconds < 60);
	CHECK(strstr(omst_last_json(), "\"kind\":\"remove\"") != NULL);
	snprintf(nm, sizeof nm, "%sr1", prefix);
	omst_info_t info;
	CHECK_RC(omst_stat(h, nm, &info), OMST_ENOTFOUND);
	CHECK_RC(omst_du(h, prefix, &du), 0);
	CHECK_EQ_U(du.names, 0);
	/* On this node only, with nothing left under it. */
	CHECK_RC(omst_remove_prefix(h, prefix, 0, NULL), OMST_ENOTFOUND);

	const char *bad[] = {"", "/", "a//b/", "a/../b", "./x"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		CHECK_RC(omst_remove_prefix(h, bad[i], OMST_EVERYWHERE, NULL), OMST_EINVALIDNAME);
		CHECK_RC(omst_set_ttl(h, bad[i], 1000000000, NULL), OMST_EINVALIDNAME);
	}
	CHECK_RC(omst_du(h, "a/../b", NULL), OMST_EINVALIDNAME);
	CHECK_RC(omst_remove_prefix(h, prefix, 0x80, NULL), OMST_EINVAL);
	CHECK(strstr(omst_errmsg(), "0x80") != NULL);
	CHECK_RC(omst_remove_prefix(h, NULL, 0, NULL), OMST_EINVAL);
	CHECK_RC(omst_du(NULL, "", NULL), OMST_EINVAL);
	CHECK_RC(omst_du(h, "\xff", NULL), OMST_EINVALIDNAME);
	omst_close(h);
}

static void test_files(void)
{
	omst_t *h = must_connect();
	use_default_socket();
	char in[512], out[512], nm[256];
	size_t n = 2 * MiB + 99, got_n;
	uint8_t *data = t_pattern(n, 11), *got;
	omst_info_t info;
	snprintf(in, sizeof in, "%s/in-%d.bin", t_tmp, (int)getpid());
	snprintf(out, sizeof out, "%s/out-%d.bin", t_tmp, (int)getpid());
	CHECK(write_file(in, data, n) == 0);
	strcpy(nm, t_name("file"));
	CHECK_RC(omst_put_file(h, nm, in, &info), 0);
	CHECK_EQ_U(info.size, n);
	CHECK_RC(omst_get_file(h, nm, out, &info), 0);
	got = read_file(out, &got_n);
	CHECK(got != NULL && got_n == n && memcmp(got, data, n) == 0);
	free(got);

	/* relative paths, against the working directory */
	CHECK(chdir(t_tmp) == 0);
	char rel_in[64], rel_out[64], abs_out[600];
	snprintf(rel_in, sizeof rel_in, "in-%d.bin", (int)getpid());
	snprintf(rel_out, sizeof rel_out, "rel-out-%d.bin", (int)getpid());
	snprintf(abs_out, sizeof abs_out, "%s/%s", t_tmp, rel_out);
	strcpy(nm, t_name("file/rel"));
	CHECK_RC(omst_put_file(h, nm, rel_in, NULL), 0);
	CHECK_RC(omst_get_file(h, nm, rel_out, NULL), 0);
	got = read_file(abs_out, &got_n);
	CHECK(got != NULL && got_n == n && memcmp(got, data, n) == 0);
	free(got);
	unlink(abs_out);
	/* OmniStorage */
	CHECK_RC(OmstPutFile("file/omni", rel_in), 0);
	CHECK_RC(OmstGetFile("file/omni", rel_out), 0);
	got = read_file(abs_out, &got_n);
	CHECK(got != NULL && got_n == n && memcmp(got, data, n) == 0);
	free(got);
	/* errors in the daemon */
	int r = omst_put_file(h, "file/missing", "/nonexistent/file", NULL);
	CHECK(r == OMST_EIO || r == OMST_ENOTFOUND);
	if (r != OMST_EIO)
		t_log("put_file of a missing file: %d (%s) %s", r, omst_strerror(r), omst_errmsg());
	r = omst_get_file(h, nm, "/nonexistent/dir/out", NULL);
	CHECK(r < 0 && r != OMST_ECONN && r != OMST_EPROTO);
	/* the handle still works */
	CHECK_RC(omst_stat(h, nm, &info), 0);
	unlink(in);
	unlink(abs_out);
	free(data);
	omst_close(h);
}

/* fake.c: a relay to the test daemon that caps the version it answers. */
struct vrelay;
struct vrelay *vrelay_start(uint32_t max);
const char *vrelay_path(struct vrelay *r);
int vrelay_version_seen(struct vrelay *r);
void vrelay_stop(struct vrelay *r);

/* Reads a pipe slowly and compares what it reads with want. */
struct slow_reader {
	int fd;
	const uint8_t *want;
	size_t n;
	int ok;
};

static void *slow_read(void *arg)
{
	struct slow_reader *r = arg;
	static uint8_t buf[MiB];
	size_t at = 0;
	int same = 1;
	for (;;) {
		size_t got = 0;
		ssize_t k = 1;
		while (got < MiB && (k = read(r->fd, buf + got, MiB - got)) > 0)
			got += (size_t)k;
		if (got > r->n - at || memcmp(buf, r->want + at, got) != 0)
			same = 0;
		at += got;
		if (k <= 0)
			break;
		usleep(20000);
	}
	r->ok = same && at == r->n;
	return NULL;
}

struct progress_calls {
	int calls, increasing;
	uint64_t first, last, size;
};

static int count_progress(void *arg, uint64_t done, uint64_t size)
{
	struct progress_calls *p = arg;
	if (p->calls == 0)
		p->first = done;
	else if (done <= p->last)
		p->increasing = 0;
	p->calls++;
	p->last = done;
	p->size = size;
	return 0;
}

/* A 64 MiB get into a file from the real daemon (protocol version 8)
 * calls the progress callback with increasing values, the last the blob's
 * size; a cold get from a peer would call it more often, a local one at
 * least once. Through a relay capped at version 4 (a daemon without
 * GET_TO_FD: the library writes the file), once, with the size; a daemon of
 * version 7 is fake_get_progress's (the relay passes no descriptors). */
static void test_get_progress(void)
{
	omst_t *h = must_connect();
	char in[512], out[512], nm[256];
	size_t n = 64 * MiB, got_n;
	uint8_t *data = t_pattern(n, 64), *got;
	omst_info_t info;
	snprintf(in, sizeof in, "%s/prog-in-%d.bin", t_tmp, (int)getpid());
	snprintf(out, sizeof out, "%s/prog-out-%d.bin", t_tmp, (int)getpid());
	CHECK(write_file(in, data, n) == 0);
	strcpy(nm, t_name("progress"));
	CHECK_RC(omst_put_file(h, nm, in, &info), 0);
	struct progress_calls p = {.increasing = 1};
	CHECK_RC(omst_get_file_progress(h, nm, out, count_progress, &p, &info), 0);
	CHECK_EQ_U(info.size, n);
	CHECK(p.calls >= 1 && p.increasing);
	CHECK_EQ_U(p.last, n);
	CHECK_EQ_U(p.size, n);
	t_log("64 MiB get into a file: %d progress calls, first %llu", p.calls, (unsigned long long)p.first);
	got = read_file(out, &got_n);
	CHECK(got != NULL && got_n == n && memcmp(got, data, n) == 0);
	free(got);

	/* Into a pipe drained slowly (1 MiB per 20 ms, about 1.3 s): the daemon
	 * reports the bytes as they go, so the callback is called several
	 * times. */
	int pfd[2];
	CHECK(pipe(pfd) == 0);
	struct slow_reader sr = {.fd = pfd[0], .want = data, .n = n, .ok = 0};
	pthread_t th;
	pthread_create(&th, NULL, slow_read, &sr);
	memset(&p, 0, sizeof p);
	p.increasing = 1;
	CHECK_RC(omst_get_to_fd_progress(h, nm, pfd[1], count_progress, &p, &info), 0);
	close(pfd[1]);
	pthread_join(th, NULL);
	close(pfd[0]);
	CHECK(sr.ok);
	CHECK(p.calls >= 3 && p.increasing);
	CHECK_EQ_U(p.last, n);
	t_log("64 MiB get into a slow pipe: %d progress calls, first %llu", p.calls, (unsigned long long)p.first);

	struct vrelay *r = vrelay_start(4);
	if (r != NULL) {
		omst_t *h7;
		CHECK_RC(omst_connect(vrelay_path(r), &h7), 0);
		memset(&p, 0, sizeof p);
		p.increasing = 1;
		CHECK_RC(omst_get_file_progress(h7, nm, out, count_progress, &p, &info), 0);
		CHECK_EQ_U(vrelay_version_seen(r), 8);
		CHECK_EQ_U(p.calls, 1);
		CHECK_EQ_U(p.last, n);
		omst_close(h7);
		vrelay_stop(r);
	}
	unlink(in);
	unlink(out);
	free(data);
	omst_close(h);
}

/* ---- library buffers --------------------------------------------------- */

static void test_zero_copy(void)
{
	int v2 = daemon_has_v2();
	if (!v2)
		t_fail(__FILE__, __LINE__, "daemon does not speak version 2 (no GET_FD): zero-copy not testable");
	omst_t *h = must_connect();
	char nm[256];
	strcpy(nm, t_name("zc"));
	size_t n = 5 * MiB + 123;
	uint8_t *data = t_pattern(n, 21);
	CHECK_RC(omst_put(h, nm, data, n, NULL), 0);
	int fds0 = count_open_fds();
	omst_buf_t *b = NULL;
	CHECK_RC(omst_get_buf(h, nm, 0, &b), 0);
	if (b) {
		CHECK(omst_buf_zero_copy(b) == v2);
		CHECK_EQ_U(omst_buf_size(b), n);
		CHECK_EQ_U(omst_buf_info(b)->size, n);
		CHECK(memcmp(omst_buf_data(b), data, n) == 0);
		CHECK(omst_buf_data_mut(b) == NULL);
		/* every descriptor was closed once mapped */
		CHECK_EQ_U(count_open_fds(), fds0);
	}
	/* writable: writes are private */
	omst_buf_t *w = NULL;
	CHECK_RC(omst_get_buf(h, nm, OMST_BUF_WRITABLE, &w), 0);
	if (w) {
		CHECK(omst_buf_zero_copy(w) == v2);
		uint8_t *p = omst_buf_data_mut(w);
		CHECK(p != NULL);
		if (p) {
			memset(p, 0, 4096);
			p[n - 1] ^= 0xFF;
		}
		CHECK(memcmp(omst_buf_data(b), data, n) == 0);
		omst_buf_release(w);
	}
	/* the buffer outlives the handle */
	omst_close(h);
	if (b) {
		CHECK(memcmp(omst_buf_data(b), data, n) == 0);
		omst_buf_release(b);
	}
	h = must_connect();
	uint8_t *got = malloc(n);
	CHECK_RC(omst_get(h, nm, got, n, NULL), 0);
	CHECK(memcmp(got, data, n) == 0);
	free(got);

	/* chunk sizes that are not page multiples: copied with pread */
	strcpy(nm, t_name("zc/unaligned"));
	CHECK_RC(omst_put_chunked(h, nm, data, 300000, 5000, NULL), 0);
	CHECK_RC(omst_get_buf(h, nm, 0, &b), 0);
	if (b) {
		CHECK(omst_buf_zero_copy(b) == 0);
		CHECK_EQ_U(omst_buf_size(b), 300000);
		CHECK(memcmp(omst_buf_data(b), data, 300000) == 0);
		omst_buf_release(b);
	}
	/* page multiples other than 1 MiB map */
	strcpy(nm, t_name("zc/12k"));
	CHECK_RC(omst_put_chunked(h, nm, data, 300001, 12288, NULL), 0);
	CHECK_RC(omst_get_buf(h, nm, 0, &b), 0);
	if (b) {
		CHECK(omst_buf_zero_copy(b) == v2);
		CHECK(memcmp(omst_buf_data(b), data, 300001) == 0);
		omst_buf_release(b);
	}
	/* empty blob */
	strcpy(nm, t_name("zc/empty"));
	CHECK_RC(omst_put(h, nm, "", 0, NULL), 0);
	CHECK_RC(omst_get_buf(h, nm, OMST_BUF_WRITABLE, &b), 0);
	if (b) {
		CHECK_EQ_U(omst_buf_size(b), 0);
		CHECK(omst_buf_data(b) != NULL);
		CHECK(omst_buf_data_mut(b) != NULL);
		omst_buf_release(b);
	}
	CHECK_EQ_U(count_open_fds(), fds0);
	free(data);
	omst_close(h);
}

static void test_copy_buf(void)
{
	omst_t *h = must_connect();
	char nm[256];
	strcpy(nm, t_name("copybuf"));
	size_t n = 2 * MiB + 1;
	uint8_t *data = t_pattern(n, 31);
	CHECK_RC(omst_put(h, nm, data, n, NULL), 0);
	omst_buf_t *b = NULL;
	CHECK_RC(omst_get_buf(h, nm, OMST_BUF_COPY, &b), 0);
	if (b) {
		CHECK(omst_buf_zero_copy(b) == 0);
		CHECK(memcmp(omst_buf_data(b), data, n) == 0);
		CHECK(omst_buf_data_mut(b) == NULL);
		omst_buf_release(b);
	}
	CHECK_RC(omst_get_buf(h, nm, OMST_BUF_COPY | OMST_BUF_WRITABLE, &b), 0);
	if (b) {
		uint8_t *p = omst_buf_data_mut(b);
		CHECK(p != NULL);
		if (p)
			p[0] ^= 1;
		CHECK(memcmp((const uint8_t *)omst_buf_data(b) + 1, data + 1, n - 1) == 0);
		omst_buf_release(b);
	}
	free(data);
	omst_close(h);
}


/* A full descriptor table: GET_FD's descriptors are lost (MSG_CTRUNC); the
 * library falls back to copying. */
static void test_fd_table_full(void)
{
	omst_t *h = must_connect();
	char nm[256];
	strcpy(nm, t_name("emfile"));
	size_t n = 8 * MiB;
	uint8_t *data = t_pattern(n, 61);
	CHECK_RC(omst_put(h, nm, data, n, NULL), 0);
	omst_buf_t *b = NULL;
	CHECK_RC(omst_get_buf(h, nm, 0, &b), 0); /* warm: one idle connection */
	omst_buf_release(b);
	/* room for two more descriptors (a new connection), not for 8 */
	int used = t_count_fds(), lim = 0;
	for (int fd = 0, free_slots = 0; fd < 4096 && free_slots < 2; fd++) {
		if (fcntl(fd, F_GETFD) < 0)
			free_slots++;
		lim = fd + 1;
	}
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	struct rlimit low = {(rlim_t)lim, rl.rlim_max};
	CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
	/* Is the limit enforced? (valgrind, for one, keeps descriptors of its
	 * own and does not apply it the same way.) */
	int probe[3], np = 0;
	while (np < 3 && (probe[np] = dup(0)) >= 0)
		np++;
	for (int i = 0; i < np; i++)
		close(probe[i]);
	const char *pre = getenv("LD_PRELOAD");
	if (pre && strstr(pre, "vgpreload")) /* valgrind's own limit is not the kernel's */
		np = -1;
	if (np != 2) {
		t_log("RLIMIT_NOFILE not enforced as expected (%d spare descriptors): skipped", np);
		setrlimit(RLIMIT_NOFILE, &rl);
		free(data);
		omst_close(h);
		return;
	}
	b = NULL;
	CHECK_RC(omst_get_buf(h, nm, 0, &b), 0);
	if (b) {
		CHECK(omst_buf_zero_copy(b) == 0);
		CHECK(memcmp(omst_buf_data(b), data, n) == 0);
		omst_buf_release(b);
	}
	/* the first attempt's message: the descriptors were lost */
	CHECK(strstr(omst_errmsg(), "MSG_CTRUNC") != NULL);
	setrlimit(RLIMIT_NOFILE, &rl);
	CHECK(t_count_fds() <= used + 1);
	b = NULL;
	CHECK_RC(omst_get_buf(h, nm, 0, &b), 0);
	if (b) {
		CHECK(omst_buf_zero_copy(b) == daemon_has_v2());
		omst_buf_release(b);
	}
	free(data);
	omst_close(h);
}

/* ---- async ------------------------------------------------------------ */

static void test_async(void)
{
	omst_t *h = must_connect();
	enum { N = 4 };
	size_t n = 8 * MiB + 17;
	char names[N][256];
	uint8_t *data[N], *got[N];
	omst_req_t *r[N];
	for (int i = 0; i < N; i++) {
		strcpy(names[i], t_name("async"));
		data[i] = t_pattern(n, 100 + (uint32_t)i);
		got[i] = malloc(n);
		CHECK_RC(omst_put(h, names[i], data[i], n, NULL), 0);
	}
	for (int i = 0; i < N; i++)
		CHECK_RC(omst_get_start(h, names[i], got[i], n, &r[i]), 0);
	/* other calls on the handle proceed meanwhile */
	omst_info_t info;
	for (int i = 0; i < 20; i++)
		CHECK_RC(omst_stat(h, names[i % N], &info), 0);
	char small[32] = "small", sgot[32];
	CHECK_RC(omst_put(h, "async/small", small, 32, NULL), 0);
	CHECK_RC(omst_get(h, "async/small", sgot, 32, NULL), 0);
	/* test until done, bounded */
	double t0 = t_now();
	for (int i = 0; i < N; i++) {
		int done = 0;
		while (!done && t_now() - t0 < 60) {
			CHECK_RC(omst_test(r[i], &done), 0);
			if (!done)
				usleep(1000);
		}
		CHECK(done);
		CHECK_RC(omst_test(r[i], &done), 0);
		CHECK(done == 1);
	}
	for (int i = 0; i < N; i++) {
		memset(&info, 0, sizeof info);
		CHECK_RC(omst_wait(r[i], &info), 0);
		CHECK_EQ_U(info.size, n);
		CHECK(strcmp(info.name, names[i]) == 0);
		CHECK(memcmp(got[i], data[i], n) == 0);
		free(got[i]);
		free(data[i]);
	}
	/* wait without test */
	uint8_t b5[5];
	CHECK_RC(omst_put(h, "async/five", "12345", 5, NULL), 0);
	CHECK_RC(omst_get_start(h, "async/five", b5, 5, &r[0]), 0);
	CHECK_RC(omst_wait(r[0], NULL), 0);
	CHECK(memcmp(b5, "12345", 5) == 0);
	omst_close(h);
}

/* ---- threads ---------------------------------------------------------- */

struct thr {
	omst_t *h;
	int id;
	int errors;
};

static void *thread_main(void *arg)
{
	struct thr *t = arg;
	for (int i = 0; i < 25; i++) {
		char nm[128];
		snprintf(nm, sizeof nm, "threads/%d/%d/%d", (int)getpid(), t->id, i);
		size_t n = (size_t)((t->id * 7919 + i * 104729) % 300000);
		uint8_t *d = t_pattern(n, (uint32_t)(t->id * 1000 + i)), *g = malloc(n + 1);
		omst_info_t info;
		int e = omst_put(t->h, nm, d, n, &info);
		if (e == 0)
			e = omst_get(t->h, nm, g, n, &info);
		if (e == 0 && memcmp(d, g, n) != 0)
			e = -999;
		if (e == 0)
			e = omst_stat(t->h, nm, &info);
		if (e == 0 && info.size != n)
			e = -998;
		if (e == 0 && i % 5 == 0) {
			omst_buf_t *b;
			e = omst_get_buf(t->h, nm, 0, &b);
			if (e == 0) {
				if (memcmp(omst_buf_data(b), d, n) != 0)
					e = -997;
				omst_buf_release(b);
			}
		}
		if (e) {
			t_fail(__FILE__, __LINE__, "thread %d iteration %d: %d (%s) %s", t->id, i, e, omst_strerror(e),
			       omst_errmsg());
			t->errors++;
		}
		free(d);
		free(g);
	}
	return NULL;
}

static void test_threads(void)
{
	omst_t *h = must_connect();
	enum { T = 12 };
	pthread_t th[T];
	struct thr ts[T];
	for (int i = 0; i < T; i++) {
		ts[i] = (struct thr){h, i, 0};
		pthread_create(&th[i], NULL, thread_main, &ts[i]);
	}
	for (int i = 0; i < T; i++)
		pthread_join(th[i], NULL);
	omst_close(h);
}

/* ---- fork ------------------------------------------------------------- */

static volatile int bg_stop;

static void *bg_default_user(void *arg)
{
	(void)arg;
	uint8_t buf[MiB];
	while (!bg_stop) {
		int e = OmstGetData("fork/base", buf, MiB);
		if (e)
			t_fail(__FILE__, __LINE__, "parent background get: %d %s", e, omst_errmsg());
	}
	return NULL;
}

static void test_fork(void)
{
	use_default_socket();
	size_t n = MiB;
	uint8_t *data = t_pattern(n, 41), *got = malloc(n);
	CHECK_RC(OmstPutData("fork/base", data, n), 0);
	omst_t *h = must_connect();
	CHECK_RC(omst_get(h, "fork/base", got, n, NULL), 0);
	/* a parent thread keeps using the default handle during the forks */
	pthread_t bg;
	bg_stop = 0;
	pthread_create(&bg, NULL, bg_default_user, NULL);
	enum { C = 4 };
	pid_t kids[C];
	for (int i = 0; i < C; i++) {
		fflush(NULL);
		kids[i] = fork();
		if (kids[i] == 0) {
			int bad = 0;
			alarm(60);
			for (int k = 0; k < 5; k++) {
				memset(got, 0, n);
				if (OmstGetData("fork/base", got, n) != 0 || memcmp(got, data, n) != 0)
					bad = 1;
				if (omst_get(h, "fork/base", got, n, NULL) != 0 || memcmp(got, data, n) != 0)
					bad = 1;
			}
			char nm[64];
			snprintf(nm, sizeof nm, "fork/child/%d", i);
			if (OmstPutData(nm, data, 1000 + (size_t)i) != 0)
				bad = 1;
			if (bad)
				fprintf(stderr, "    child %d: %s\n", i, omst_errmsg());
			free(data);
			free(got);
			_exit(bad);
		}
	}
	for (int k = 0; k < 10; k++)
		CHECK_RC(omst_get(h, "fork/base", got, n, NULL), 0);
	for (int i = 0; i < C; i++) {
		int st;
		CHECK(waitpid(kids[i], &st, 0) == kids[i]);
		if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0))
			t_fail(__FILE__, __LINE__, "child %d failed (status 0x%x)", i, st);
	}
	bg_stop = 1;
	pthread_join(bg, NULL);
	for (int i = 0; i < C; i++) {
		char nm[64];
		snprintf(nm, sizeof nm, "fork/child/%d", i);
		CHECK_RC(OmstGetData(nm, got, 1000 + (size_t)i), 0);
		CHECK(memcmp(got, data, 1000 + (size_t)i) == 0);
	}
	CHECK_RC(omst_get(h, "fork/base", got, n, NULL), 0);
	omst_close(h);
	free(data);
	free(got);
}

/* ---- daemon killed mid-call --------------------------------------------- */

struct bigget {
	omst_t *h;
	const char *name;
	uint8_t *buf;
	size_t n;
	int put;
	volatile int result;
	volatile int done;
	double t_end;
};

static void *bigget_main(void *arg)
{
	struct bigget *g = arg;
	g->result = g->put ? omst_put(g->h, g->name, g->buf, g->n, NULL) : omst_get(g->h, g->name, g->buf, g->n, NULL);
	g->t_end = t_now();
	__atomic_store_n(&g->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static void test_kill_mid_get(void)
{
	struct t_daemon d;
	if (t_daemon_start(&d) != 0) {
		t_fail(__FILE__, __LINE__, "cannot start a second daemon");
		return;
	}
	setenv("OMST_TIMEOUT_MS", "20000", 1);
	omst_t *h;
	CHECK_RC(omst_connect(d.sock, &h), 0);
	size_t n = 256u * MiB;
	uint8_t *data = t_pattern(n, 77);
	CHECK_RC(omst_put(h, "big", data, n, NULL), 0);
	uint8_t *buf = calloc(1, n);
	/* watch a word that the download changes, 32 MiB in */
	size_t watch = 32u * MiB;
	while (*(uint64_t *)(data + watch) == 0)
		watch += 8;
	struct bigget g = {h, "big", buf, n, 0, 0, 0, 0};
	pthread_t th;
	pthread_create(&th, NULL, bigget_main, &g);
	double t0 = t_now();
	while (__atomic_load_n((volatile uint64_t *)(buf + watch), __ATOMIC_RELAXED) == 0 && !g.done &&
	       t_now() - t0 < 30)
		;
	double tk = t_now();
	t_daemon_kill(&d);
	while (!g.done && t_now() - tk < 30)
		usleep(1000);
	CHECK(g.done);
	if (g.done) {
		pthread_join(th, NULL);
		/* Judged by its result, not by whether it had ended when looked
		 * at before the kill: it may end between that look and the kill,
		 * or succeed from bytes the daemon had queued before dying. */
		if (g.result == 0) {
			CHECK(memcmp(buf, data, n) == 0);
			t_log("the get finished before the kill took effect: inconclusive");
		} else {
			CHECK(g.result == OMST_ECONN);
			CHECK(g.t_end - tk < 5.0);
			t_log("get failed %.3f s after the kill: %d (%s) %s", g.t_end - tk, g.result,
			      omst_strerror(g.result), "");
		}
	}
	/* nothing answers any more */
	omst_info_t info;
	int r = omst_stat(h, "big", &info);
	CHECK(r == OMST_ECONN || r == OMST_ENODAEMON);
	omst_t *h2;
	CHECK_RC(omst_connect(d.sock, &h2), OMST_ENODAEMON);
	omst_close(h);

	/* the same for a put (and no SIGPIPE) */
	t_daemon_stop(&d); /* removes the home */
	if (t_daemon_start(&d) != 0) {
		t_fail(__FILE__, __LINE__, "cannot restart the second daemon");
		free(data);
		free(buf);
		return;
	}
	CHECK_RC(omst_connect(d.sock, &h), 0);
	struct bigget p = {h, "bigput", data, n, 1, 0, 0, 0};
	pthread_create(&th, NULL, bigget_main, &p);
	/* Kill once the daemon writes the put's bytes, not after a fixed
	 * delay: a put thread that has not reached the daemon before the kill
	 * finds its idle connection closed, opens a new one and gets
	 * OMST_ENODAEMON, not OMST_ECONN (under load, 50 ms were not always
	 * enough for the thread to start). */
	static const char *const stored[] = {"cache/tmp/*", "cache/chunks/*/*", "cache/blobs/*"};
	t0 = t_now();
	for (int found = 0; !found && !p.done && t_now() - t0 < 30;) {
		for (size_t i = 0; i < sizeof stored / sizeof *stored && !found; i++) {
			char pat[320];
			glob_t gl;
			snprintf(pat, sizeof pat, "%s/%s", d.home, stored[i]);
			found = glob(pat, 0, NULL, &gl) == 0 && gl.gl_pathc > 0;
			globfree(&gl);
		}
		if (!found)
			usleep(1000);
	}
	tk = t_now();
	t_daemon_kill(&d);
	while (!p.done && t_now() - tk < 30)
		usleep(1000);
	CHECK(p.done);
	if (p.done) {
		pthread_join(th, NULL);
		if (p.result == 0)
			t_log("the put finished before the kill took effect: inconclusive");
		else
			CHECK(p.result == OMST_ECONN);
	}
	omst_close(h);
	t_daemon_stop(&d);
	free(data);
	free(buf);
}


/* ---- signals: EINTR everywhere ------------------------------------------ */

static volatile int sig_count, sig_stop;

static void on_usr1(int sig)
{
	(void)sig;
	sig_count++;
}

static void *signaller(void *arg)
{
	pthread_t target = *(pthread_t *)arg;
	while (!sig_stop) {
		pthread_kill(target, SIGUSR1);
		usleep(100);
	}
	return NULL;
}

static void test_eintr(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_usr1; /* no SA_RESTART: blocking calls fail with EINTR */
	sigaction(SIGUSR1, &sa, NULL);
	omst_t *h = must_connect();
	size_t n = 48 * MiB + 5;
	uint8_t *data = t_pattern(n, 51), *got = malloc(n);
	pthread_t self = pthread_self(), th;
	sig_stop = 0;
	pthread_create(&th, NULL, signaller, &self);
	char nm[256];
	strcpy(nm, t_name("eintr"));
	CHECK_RC(omst_put(h, nm, data, n, NULL), 0);
	for (int i = 0; i < 3; i++) {
		memset(got, 0, n);
		CHECK_RC(omst_get(h, nm, got, n, NULL), 0);
		CHECK(memcmp(got, data, n) == 0);
		omst_buf_t *b = NULL;
		CHECK_RC(omst_get_buf(h, nm, i == 2 ? OMST_BUF_COPY : 0, &b), 0);
		if (b) {
			CHECK(memcmp(omst_buf_data(b), data, n) == 0);
			omst_buf_release(b);
		}
		omst_info_t info;
		for (int k = 0; k < 50; k++)
			CHECK_RC(omst_stat(h, nm, &info), 0);
		omst_t *h2 = NULL;
		CHECK_RC(omst_connect(t_sock, &h2), 0);
		omst_close(h2);
	}
	/* put_file and get_file: the library's own reads, writes and opens */
	char fin[512], fout[512], fnm[256];
	snprintf(fin, sizeof fin, "%s/eintr-in-%d", t_tmp, (int)getpid());
	snprintf(fout, sizeof fout, "%s/eintr-out-%d", t_tmp, (int)getpid());
	CHECK(write_file(fin, data, n) == 0);
	strcpy(fnm, t_name("eintr/file"));
	CHECK_RC(omst_put_file(h, fnm, fin, NULL), 0);
	CHECK_RC(omst_get_file(h, fnm, fout, NULL), 0);
	size_t fn = 0;
	uint8_t *fgot = read_file(fout, &fn);
	CHECK(fgot != NULL && fn == n && memcmp(fgot, data, n) == 0);
	free(fgot);
	unlink(fin);
	unlink(fout);
	sig_stop = 1;
	pthread_join(th, NULL);
	CHECK(sig_count > 100);
	t_log("%d signals delivered", sig_count);
	free(data);
	free(got);
	omst_close(h);
}

/* fake.c */
void test_fake_timeout(void);
void test_fake_truncated(void);
void test_fake_version1(void);
void test_fake_no_namespaces(void);
void test_fake_idle_close(void);
void test_fake_fds(void);
void test_fake_garbage(void);
void test_fake_error_reconnects(void);
void test_fake_cut_put(void);
void test_fake_killed_putter(void);
void test_fake_fd_frames(void);
void test_fake_fd_progress(void);
void test_fake_get_progress(void);

/* files.c */
void test_file_resolve(void);
void test_file_may_follow(void);
void test_file_roundtrip(void);
void test_file_failures(void);
void test_file_in_place(void);
void test_fifo_bounded(void);
void test_fd_calls(void);
void test_file_fallback(void);
void test_file_planted(void);
void test_file_other_user(void);

void test_many(void);
void test_fake_many_version6(void);

static const struct test tests[] = {
	{"vectors", test_vectors, 0},
	{"names", test_names, 0},
	{"strerror", test_strerror, 0},
	{"no_daemon", test_no_daemon, 0},
	{"default_socket", test_default_socket, 0},
	{"slurm_socket", test_slurm_socket, 0},
	{"null_args", test_null_args, 0},
	{"invalid_names", test_invalid_names, 0},
	{"roundtrip", test_roundtrip, 0},
	{"many", test_many, 0},
	{"put_overwrite", test_put_overwrite, 0},
	{"size_mismatch", test_size_mismatch, 0},
	{"not_found", test_not_found, 0},
	{"stat_remove", test_stat_remove, 0},
	{"namespaces", test_namespaces, 0},
	{"files", test_files, 0},
	{"zero_copy", test_zero_copy, 0},
	{"copy_buf", test_copy_buf, 0},
	{"fd_table_full", test_fd_table_full, 0},
	{"async", test_async, 0},
	{"threads", test_threads, 0},
	{"fork", test_fork, 0},
	{"eintr", test_eintr, 0},
	{"fake_timeout", test_fake_timeout, 0},
	{"fake_truncated", test_fake_truncated, 0},
	{"fake_version1", test_fake_version1, 0},
	{"fake_many_version6", test_fake_many_version6, 0},
	{"fake_no_namespaces", test_fake_no_namespaces, 0},
	{"fake_idle_close", test_fake_idle_close, 0},
	{"fake_fds", test_fake_fds, 0},
	{"fake_garbage", test_fake_garbage, 0},
	{"fake_error_reconnects", test_fake_error_reconnects, 0},
	{"fake_cut_put", test_fake_cut_put, 0},
	{"fake_killed_putter", test_fake_killed_putter, 0},
	{"fake_fd_frames", test_fake_fd_frames, 0},
	{"fake_fd_progress", test_fake_fd_progress, 0},
	{"fake_get_progress", test_fake_get_progress, 0},
	{"get_progress", test_get_progress, 120},
	{"file_resolve", test_file_resolve, 0},
	{"file_may_follow", test_file_may_follow, 0},
	{"file_roundtrip", test_file_roundtrip, 0},
	{"file_failures", test_file_failures, 0},
	{"file_in_place", test_file_in_place, 60},
	{"fifo_bounded", test_fifo_bounded, 30},
	{"fd_calls", test_fd_calls, 60},
	{"file_fallback", test_file_fallback, 120},
	{"file_planted", test_file_planted, 30},
	{"file_other_user", test_file_other_user, 120},
	{"kill_mid_get", test_kill_mid_get, 180},
};

int main(void)
{
	/* SIGPIPE keeps its default action: the library must not raise it. */
	signal(SIGPIPE, SIG_DFL);
	setvbuf(stdout, NULL, _IOLBF, 0);
	unsetenv("OMST_TIMEOUT_MS");
	t_omst_bin = getenv("OMST_BIN");
	if (t_omst_bin == NULL || *t_omst_bin == '\0')
		t_omst_bin = "../../bin/omst";
	static char tmp[] = "/tmp/omst-ctest-scratch-XXXXXX";
	if (mkdtemp(tmp) == NULL) {
		perror("mkdtemp");
		return 2;
	}
	t_tmp = tmp;
	struct t_daemon d;
	memset(&d, 0, sizeof d);
	if (access(t_omst_bin, X_OK) != 0)
		fprintf(stderr, "no omst binary at %s (set OMST_BIN; build it with go build -o bin/omst ./cmd/omst): "
		                "the daemon tests will fail\n", t_omst_bin);
	else if (t_daemon_start(&d) != 0)
		fprintf(stderr, "could not start the daemon: the daemon tests will fail\n");
	t_sock = d.sock[0] ? d.sock : "/nonexistent/omst.sock";
	t_home = d.home[0] ? d.home : "/nonexistent";
	int rc = t_run(tests, sizeof tests / sizeof *tests);
	t_daemon_stop(&d);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmp);
	return rc;
}
