package main

import (
	"os"
	"path/filepath"
	"syscall"
)

// slurmSocket is the socket of this node's daemon of this Slurm job, the
// one `omst slurm up` started, or "" when there is none. The rule, the
// same in the CLI, the C library (bindings/c/src/api.c) and the Python
// package (bindings/python/omst/client.py), applies only when neither
// $OMST_SOCKET nor $OMST_HOME (nor --home) is set:
//
//   - $SLURM_JOB_ID is set and usable as a path element (JOB);
//   - NODE is $SLURMD_NODENAME, else the host name up to its first dot;
//   - BASE is $TMPDIR if set, else /tmp;
//   - BASE/omst-slurm-JOB is a directory owned by this (effective) user,
//     and BASE/omst-slurm-JOB/NODE/omst.sock exists:
//
// then that socket. Otherwise the default applies (~/.omst/omst.sock).
func slurmSocket(env slurmEnv, hostname func() (string, error), uid int) string {
	job := env("SLURM_JOB_ID")
	if job == "" {
		return ""
	}
	base := tmpBase(env)
	dir, err := slurmJobDir(base, job)
	if err != nil {
		return ""
	}
	home, err := slurmNodeHome(base, job, slurmNodeName(env, hostname))
	if err != nil {
		return ""
	}
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() {
		return ""
	}
	if s, ok := st.Sys().(*syscall.Stat_t); !ok || int(s.Uid) != uid {
		return "" // made by someone else: not ours to trust
	}
	sock := filepath.Join(home, "omst.sock")
	if _, err := os.Stat(sock); err != nil {
		return ""
	}
	return sock
}
