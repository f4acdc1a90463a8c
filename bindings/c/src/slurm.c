/*
 * slurm.c: the socket of this node's daemon of this Slurm job, the one
 * `omst slurm up` started. The same rule as the CLI's (cmd/omst/slurmsock.go)
 * and the Python package's (omst/client.py), used only when neither
 * $OMST_SOCKET nor $OMST_HOME is set:
 *
 *   JOB  = $SLURM_JOB_ID (set, and usable as a path element);
 *   NODE = $SLURMD_NODENAME, else the host name up to its first dot;
 *   BASE = $TMPDIR if set, else /tmp;
 *   if BASE/omst-slurm-JOB is a directory owned by this (effective) user
 *   and BASE/omst-slurm-JOB/NODE/omst.sock exists, that socket.
 *
 * Otherwise the default applies (~/.omst/omst.sock).
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* component: usable as one element of a path. */
static int component(const char *s)
{
	return s != NULL && *s != '\0' && strcmp(s, ".") != 0 && strcmp(s, "..") != 0 && strchr(s, '/') == NULL;
}

int omst_slurm_socket(char **out)
{
	const char *job = getenv("SLURM_JOB_ID");
	if (!component(job))
		return 0;
	char host[256];
	const char *node = getenv("SLURMD_NODENAME");
	if (node == NULL || *node == '\0') {
		if (gethostname(host, sizeof host) != 0)
			return 0;
		host[sizeof host - 1] = '\0';
		char *dot = strchr(host, '.');
		if (dot)
			*dot = '\0';
		node = host;
	}
	if (!component(node))
		return 0;
	const char *base = getenv("TMPDIR");
	if (base == NULL || *base == '\0')
		base = "/tmp";
	size_t n = strlen(base) + strlen(job) + strlen(node) + 32;
	char *p = malloc(n);
	if (p == NULL)
		return 0;
	struct stat st;
	snprintf(p, n, "%s/omst-slurm-%s", base, job);
	if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
		free(p);
		return 0;
	}
	snprintf(p, n, "%s/omst-slurm-%s/%s/omst.sock", base, job, node);
	if (stat(p, &st) != 0) {
		free(p);
		return 0;
	}
	*out = p;
	return 1;
}
