/*
 * error.c: error codes' descriptions and the calling thread's last
 * message (thread-local; the only per-thread state of the library).
 */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Large enough for the daemon's longest message (4096 bytes) and a prefix. */
static __thread char t_msg[4608];

int omst_fail(int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(t_msg, sizeof t_msg, fmt, ap);
	va_end(ap);
	return code;
}

int omst_fail_msg(int code, const char *msg, size_t n)
{
	if (n > sizeof t_msg - 1)
		n = sizeof t_msg - 1;
	memcpy(t_msg, msg, n);
	t_msg[n] = '\0';
	return code;
}

int omst_code_from_wire(uint32_t code)
{
	if (code >= 1 && code <= 14)
		return -(int)code;
	return OMST_EUNKNOWN;
}

OMST_EXPORT const char *omst_errmsg(void)
{
	return t_msg;
}

OMST_EXPORT const char *omst_strerror(int code)
{
	switch (code) {
	case OMST_OK: return "success";
	case OMST_ENOTFOUND: return "no such name";
	case OMST_EINVALIDNAME: return "invalid name";
	case OMST_EBADREQUEST: return "request refused as malformed by the daemon";
	case OMST_EIO: return "IO error (in the daemon, or on the caller's file)";
	case OMST_ENOSPACE: return "no space left (disk or cache full)";
	case OMST_EUNREACHABLE: return "a peer needed for the request cannot be reached";
	case OMST_ECORRUPT: return "content does not match its hash";
	case OMST_ESIZE: return "blob size differs from the size given";
	case OMST_EVERSION: return "no common protocol version with the daemon";
	case OMST_EINTERNAL: return "internal error in the daemon";
	case OMST_EABORTED: return "request aborted";
	case OMST_ETIMEDOUT: return "timed out";
	case OMST_EUNAVAILABLE: return "the blob's bytes are missing here and no source has them";
	case OMST_EFORBIDDEN: return "not allowed by this node's grid role or name prefixes, or the caller's local rights";
	case OMST_EINVAL: return "invalid argument";
	case OMST_ENODAEMON: return "no omst daemon answers at the socket";
	case OMST_ECONN: return "connection to the daemon lost";
	case OMST_EPROTO: return "protocol error (the daemon sent something unexpected)";
	case OMST_ENOMEM: return "out of memory";
	case OMST_ESYS: return "system call failed";
	case OMST_EMFILE: return "descriptor table full while receiving descriptors";
	case OMST_EUNKNOWN: return "unknown error code from the daemon";
	}
	return "unknown error";
}
