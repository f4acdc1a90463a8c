/*
 * taskfarm_master: a GridRPC-style task farm on omst, in the shape of
 * OmniStorage's Figure 3:
 *
 *   master:  OmstPutData("MyData", data, size);          once
 *            for (i = 0; i < n; i++) req[i] = CallAsync("MyProcedure", i);
 *            WaitAll(n, req);
 *   worker:  MyProcedure(i) { OmstGetData("MyData", data, size); ... }
 *
 * Here the "asynchronous RPC" is a worker process (taskfarm_worker) started
 * with fork+exec, one per task, at most PARALLEL at a time; its parameters
 * are its arguments, and its environment names the daemon of the host it
 * runs on (OMST_SOCKET). Task i runs on worker daemon i mod W, so with more
 * tasks than worker hosts the later tasks find the initial data in their
 * host's cache. The initial data never travels in the call: the master puts
 * it once, the workers fetch it by name through the tree. The workers put
 * their results by name; the master reads them back by name at the end and
 * checks every one.
 *
 * usage: taskfarm_master [-t TASKS] [-p PARALLEL] [-s INIT_MIB] [-r RESULT_KIB]
 *                        [-W WORKER_BIN] [-T TIMEOUT_S] [PREFIX]
 *   The master uses the default daemon ($OMST_SOCKET, else $OMST_HOME/omst.sock,
 *   else ~/.omst/omst.sock). Worker daemons: OMST_WORKER_SOCKETS="s0:s1:...";
 *   if unset, the workers use the master's default daemon too.
 *   Defaults: TASKS = 2 x W, PARALLEL = W, 32 MiB initial data, 1 MiB results,
 *   the worker binary next to this one, 60 s timeout, PREFIX taskfarm/<time-pid>.
 * Exit status 0 only if every task succeeded and every result is right.
 */
#define _POSIX_C_SOURCE 200809L
#include "taskfarm.h"

#include <omst.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void fail_call(const char *what, const char *name, int rc)
{
	const char *msg = omst_errmsg();
	fprintf(stderr, "taskfarm_master: %s %s: %s%s%s\n", what, name, omst_strerror(rc), msg && *msg ? ": " : "",
	        msg ? msg : "");
}

/* Split a ':'-separated list into a NULL-terminated array (empty entries
 * dropped) of pointers into *copy (free both); *n gets the count. */
static char **split_list(const char *list, int *n, char **copy_out)
{
	*n = 0;
	char *copy = *copy_out = strdup(list ? list : "");
	char **out = copy ? calloc(strlen(copy) / 2 + 2, sizeof *out) : NULL;
	if (!out)
		return NULL;
	for (char *save = NULL, *s = strtok_r(copy, ":", &save); s; s = strtok_r(NULL, ":", &save))
		out[(*n)++] = s;
	return out;
}

/* The environment of a worker: ours, with OMST_SOCKET replaced (built
 * before fork, so the child only calls execve). */
static char **worker_env(const char *sock)
{
	size_t n = 0;
	while (environ[n])
		n++;
	char **env = calloc(n + 2, sizeof *env);
	if (!env)
		return NULL;
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (!sock || strncmp(environ[i], "OMST_SOCKET=", 12) != 0)
			env[k++] = environ[i];
	if (sock) {
		size_t len = strlen(sock) + 13;
		char *e = malloc(len);
		if (!e)
			return NULL;
		snprintf(e, len, "OMST_SOCKET=%s", sock);
		env[k++] = e;
	}
	env[k] = NULL;
	return env;
}

/* Running workers, each the leader of its own process group (so a worker
 * that is a script takes its children along when it is killed). */
static pid_t *pids;
static volatile long npids;

static void kill_workers(int sig)
{
	for (long t = 0; t < npids; t++)
		if (pids[t] > 0)
			kill(-pids[t], sig);
}

/* SIGINT/SIGTERM/SIGHUP on the master: the workers go too. */
static void on_signal(int sig)
{
	kill_workers(SIGKILL);
	signal(sig, SIG_DFL);
	raise(sig);
}

/* The worker binary next to ours. */
static char *default_worker(const char *argv0)
{
	char self[4096];
	ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
	const char *base = argv0;
	if (len > 0) {
		self[len] = 0;
		base = self;
	}
	const char *slash = strrchr(base, '/');
	size_t dir = slash ? (size_t)(slash - base + 1) : 0;
	char *out = malloc(dir + sizeof "taskfarm_worker" + 2);
	if (!out)
		return NULL;
	if (dir)
		memcpy(out, base, dir);
	else
		memcpy(out, "./", dir = 2);
	strcpy(out + dir, "taskfarm_worker");
	return out;
}

static void usage(void)
{
	fprintf(stderr, "usage: taskfarm_master [-t TASKS] [-p PARALLEL] [-s INIT_MIB] [-r RESULT_KIB] [-W WORKER_BIN] "
	                "[-T TIMEOUT_S] [PREFIX]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	long tasks = 0, parallel = 0, init_mib = 32, result_kib = 1024, timeout_s = 60;
	const char *worker = NULL;
	char *worker_alloc = NULL, *socks_copy = NULL;
	int opt;
	while ((opt = getopt(argc, argv, "t:p:s:r:W:T:h")) != -1) {
		switch (opt) {
		case 't': tasks = strtol(optarg, NULL, 10); break;
		case 'p': parallel = strtol(optarg, NULL, 10); break;
		case 's': init_mib = strtol(optarg, NULL, 10); break;
		case 'r': result_kib = strtol(optarg, NULL, 10); break;
		case 'W': worker = optarg; break;
		case 'T': timeout_s = strtol(optarg, NULL, 10); break;
		default: usage();
		}
	}
	if (argc - optind > 1 || tasks < 0 || tasks > 10000 || parallel < 0 || init_mib < 1 || init_mib > 4096 ||
	    result_kib < 1 || result_kib > 1024 * 1024 || timeout_s < 1)
		usage();
	char prefix[512];
	if (optind < argc)
		snprintf(prefix, sizeof prefix, "%s", argv[optind]);
	else
		snprintf(prefix, sizeof prefix, "taskfarm/%ld-%d", (long)time(NULL), (int)getpid());
	if (!worker && !(worker = worker_alloc = default_worker(argv[0])))
		return 1;

	int nsock;
	char **socks = split_list(getenv("OMST_WORKER_SOCKETS"), &nsock, &socks_copy);
	if (!socks)
		return 1;
	int hosts = nsock ? nsock : 1;
	if (tasks == 0)
		tasks = 2 * hosts;
	if (parallel == 0)
		parallel = hosts;
	size_t init_size = (size_t)init_mib << 20, result_size = (size_t)result_kib << 10;
	char init_name[600], name[600];
	snprintf(init_name, sizeof init_name, "%s/init", prefix);
	const char *msock = getenv("OMST_SOCKET");

	char on[64];
	if (nsock)
		snprintf(on, sizeof on, "%d worker daemon(s)", nsock);
	else
		snprintf(on, sizeof on, "the master's daemon (no OMST_WORKER_SOCKETS)");
	printf("taskfarm_master: %ld tasks on %s, %ld at a time; initial data %s (%ld MiB); master daemon %s\n", tasks,
	       on, parallel, init_name, init_mib, msock && *msock ? msock : "(default socket)");

	/* OmstPutData("MyData", data, size): once, before any task starts. */
	unsigned char *data = malloc(init_size), *res = malloc(result_size);
	if (!data || !res)
		return 1;
	tf_fill_init(data, init_size);
	double t0 = tf_now();
	int rc = OmstPutData(init_name, data, init_size);
	if (rc != OMST_OK) {
		fail_call("OmstPutData", init_name, rc);
		return 1;
	}
	printf("  OmstPutData %s: %.3f s\n", init_name, tf_now() - t0);

	/* The "asynchronous calls": worker processes, at most `parallel` at a
	 * time; then "WaitAll". */
	char ***envs = calloc((size_t)hosts, sizeof *envs);
	pids = calloc((size_t)tasks, sizeof *pids);
	if (!envs || !pids)
		return 1;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	for (int i = 0; i < hosts; i++)
		if (!(envs[i] = worker_env(nsock ? socks[i] : NULL)))
			return 1;
	char a_init[32], a_res[32], a_task[32];
	snprintf(a_init, sizeof a_init, "%zu", init_size);
	snprintf(a_res, sizeof a_res, "%zu", result_size);

	double t_farm = tf_now(), deadline = t_farm + (double)timeout_s;
	long next = 0, running = 0, finished = 0, failed = 0;
	while (finished < tasks) {
		while (running < parallel && next < tasks) {
			snprintf(a_task, sizeof a_task, "%ld", next);
			char *wargv[] = {(char *)worker, prefix, a_task, a_init, a_res, NULL};
			fflush(NULL); /* no buffered output duplicated into the child */
			pid_t pid = fork();
			if (pid < 0) {
				perror("taskfarm_master: fork");
				failed++, finished++, next++;
				continue;
			}
			if (pid == 0) {
				setpgid(0, 0);
				execve(worker, wargv, envs[next % hosts]);
				fprintf(stderr, "taskfarm_master: exec %s: %s\n", worker, strerror(errno));
				_exit(127);
			}
			setpgid(pid, pid); /* also here: no window in which a kill misses it */
			pids[next++] = pid;
			npids = next;
			running++;
		}
		int st;
		pid_t pid = waitpid(-1, &st, WNOHANG);
		if (pid < 0 && errno != EINTR) {
			perror("taskfarm_master: waitpid");
			return 1;
		}
		if (pid > 0) {
			long t = 0;
			while (t < next && pids[t] != pid)
				t++;
			running--, finished++;
			if (t < next)
				pids[t] = 0;
			if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
				failed++;
				fprintf(stderr, "taskfarm_master: task %ld (pid %d) failed: %s %d\n", t, (int)pid,
				        WIFEXITED(st) ? "exit status" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
			}
			continue;
		}
		if (tf_now() > deadline) {
			fprintf(stderr, "taskfarm_master: tasks still running after %ld s: killing them\n", timeout_s);
			kill_workers(SIGKILL);
			for (long t = 0; t < next; t++)
				if (pids[t] > 0)
					waitpid(pids[t], NULL, 0);
			return 1;
		}
		struct timespec nap = {0, 5 * 1000 * 1000};
		nanosleep(&nap, NULL);
	}
	t_farm = tf_now() - t_farm;
	printf("  %ld tasks done in %.3f s, %ld failed\n", tasks, t_farm, failed);

	/* Read every result by name and check it against what the task must
	 * have computed from the initial data the master put. */
	long good = 0;
	double t_collect = tf_now();
	for (long t = 0; t < tasks; t++) {
		snprintf(name, sizeof name, "%s/result/%ld", prefix, t);
		memset(res, 0, result_size);
		rc = OmstGetData(name, res, result_size);
		if (rc != OMST_OK) {
			fail_call("OmstGetData", name, rc);
			continue;
		}
		uint64_t sum = tf_checksum(data, init_size, (int)t);
		size_t j, n = result_size / 8;
		for (j = 0; j < n; j++)
			if (tf_get64(res + 8 * j) != tf_result_word(sum, tf_key((int)t, j)))
				break;
		if (j < n) {
			fprintf(stderr, "taskfarm_master: %s wrong at byte %zu\n", name, j * 8);
			continue;
		}
		good++;
	}
	t_collect = tf_now() - t_collect;
	printf("  read %ld/%ld results %s/result/<task> by name and checked them: %.3f s\n", good, tasks, prefix,
	       t_collect);
	int ok = failed == 0 && good == tasks;
	printf("taskfarm_master: %s\n", ok ? "PASS" : "FAIL");

	for (int i = 0; i < hosts; i++) {
		if (nsock) /* our OMST_SOCKET=... entry, the last one */
			for (char **e = envs[i]; *e; e++)
				if (!e[1])
					free(*e);
		free(envs[i]);
	}
	free(envs);
	free(pids);
	free(socks);
	free(socks_copy);
	free(worker_alloc);
	free(data);
	free(res);
	return ok ? 0 : 1;
}
