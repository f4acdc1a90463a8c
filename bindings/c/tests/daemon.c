/* daemon.c: starts and stops real omst daemons for the tests. */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

int t_daemon_start(struct t_daemon *d)
{
	return t_daemon_start_with(d, NULL);
}

int t_daemon_start_with(struct t_daemon *d, const char *const *extra)
{
	memset(d, 0, sizeof *d);
	snprintf(d->home, sizeof d->home, "/tmp/omst-ctest-XXXXXX");
	if (mkdtemp(d->home) == NULL) {
		perror("mkdtemp");
		return -1;
	}
	snprintf(d->sock, sizeof d->sock, "%s/omst.sock", d->home);
	char log[320];
	snprintf(log, sizeof log, "%s/daemon.log", d->home);
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		/* Dies with the test runner, whatever happens to it. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
			close(fd);
		}
		const char *argv[32] = {"omst", "daemon", "--home", d->home, "--listen", "/ip4/127.0.0.1/tcp/0",
		                        "--log-level", "warn"};
		int argc = 8;
		for (int i = 0; extra && extra[i] && argc < 31; i++)
			argv[argc++] = extra[i];
		argv[argc] = NULL;
		execv(t_omst_bin, (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", t_omst_bin, strerror(errno));
		_exit(127);
	}
	d->pid = pid;
	/* Wait (bounded) until it accepts a connection. */
	for (int i = 0; i < 600; i++) {
		omst_t *h;
		if (omst_connect(d->sock, &h) == 0) {
			omst_close(h);
			return 0;
		}
		int st;
		if (waitpid(pid, &st, WNOHANG) == pid) {
			fprintf(stderr, "daemon exited at start; log %s:\n", log);
			char cmd[400];
			snprintf(cmd, sizeof cmd, "cat %s >&2", log);
			if (system(cmd) != 0)
				fprintf(stderr, "(no log)\n");
			d->pid = 0;
			return -1;
		}
		sleep_ms(50);
	}
	fprintf(stderr, "daemon did not answer at %s within 30 s\n", d->sock);
	t_daemon_stop(d);
	return -1;
}

void t_daemon_kill(struct t_daemon *d)
{
	if (d->pid > 0) {
		kill(d->pid, SIGKILL);
		while (waitpid(d->pid, NULL, 0) < 0 && errno == EINTR)
			;
		d->pid = 0;
	}
}

void t_daemon_stop(struct t_daemon *d)
{
	if (d->pid > 0) {
		kill(d->pid, SIGTERM);
		int st, done = 0;
		for (int i = 0; i < 100 && !done; i++) {
			if (waitpid(d->pid, &st, WNOHANG) == d->pid)
				done = 1;
			else
				sleep_ms(50);
		}
		if (!done)
			t_daemon_kill(d);
		d->pid = 0;
	}
	if (d->home[0] && getenv("OMST_TEST_KEEP") == NULL) {
		char cmd[400];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", d->home);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", d->home);
	}
}
