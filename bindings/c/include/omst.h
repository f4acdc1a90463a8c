/*
 * omst.h: C client of the omst daemon's local API (rpcbridge protocol,
 * docs/rpcbridge.md). C99 and libc only: the library speaks the protocol
 * over the daemon's unix socket; there is no Go runtime in the caller.
 *
 * Two APIs:
 *   - OmniStorage's calls (OmstPutData, OmstGetData, OmstPutFile,
 *     OmstGetFile) on the default daemon, for existing RPC stubs and MPI
 *     ranks;
 *   - a handle API for new code: explicit connections, caller or library
 *     buffers (zero-copy when the daemon passes file descriptors), an
 *     asynchronous get, stat and remove.
 *
 * Every function returns 0 (OMST_OK) on success or a negative OMST_E* code;
 * omst_strerror(code) describes a code, omst_errmsg() gives the daemon's or
 * the library's message for the calling thread's last failure. A call never
 * reports success for a partial result.
 *
 * Files (OmstPutFile, OmstGetFile, omst_put_file, omst_get_file) are
 * opened by the library with the calling process's rights, never the
 * daemon's, and passed to the daemon as descriptors (omst_put_fd,
 * omst_get_to_fd).
 *
 * The default daemon's socket is $OMST_SOCKET, else $OMST_HOME/omst.sock,
 * else, inside a Slurm job, this node's daemon of the job if `omst slurm up`
 * started one ($TMPDIR or /tmp, omst-slurm-$SLURM_JOB_ID/NODE/omst.sock, NODE
 * being $SLURMD_NODENAME or the short host name, the job's directory owned
 * by this user; docs/operations.md, "Under Slurm"), else ~/.omst/omst.sock.
 */
#ifndef OMST_H
#define OMST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Protocol version this library asks for. It also works with older
 * daemons: below version 8 a get into a file calls its progress callback
 * once, at the end; below version 7 it sends one GET or PUT per name for the many
 * names calls; below version 6 without job namespaces (omst_remove_prefix,
 * omst_set_ttl, omst_du: OMST_EVERSION); below 5 it streams the caller's
 * files itself (PUT and GET) instead of passing descriptors; below 2,
 * without zero-copy. */
#define OMST_PROTOCOL_VERSION 8

/* Longest name in bytes (names are UTF-8, '/'-separated, see the docs). */
#define OMST_NAME_MAX 1024

/* Error codes. -1 .. -12 are the daemon's error codes (docs/rpcbridge.md
 * section 7), negated; the others are the library's own. */
enum omst_error {
	OMST_OK = 0,
	OMST_ENOTFOUND = -1,     /* no such name */
	OMST_EINVALIDNAME = -2,  /* name breaks the naming rules (or too long) */
	OMST_EBADREQUEST = -3,   /* the daemon refused the request as malformed */
	OMST_EIO = -4,           /* file system or stream IO error: in the daemon, or the
	                          * library's own on the caller's file (errno is set) */
	OMST_ENOSPACE = -5,      /* disk or cache full */
	OMST_EUNREACHABLE = -6,  /* a peer needed for the request cannot be reached */
	OMST_ECORRUPT = -7,      /* content does not match its hash */
	OMST_ESIZE = -8,         /* blob size differs from the size given */
	OMST_EVERSION = -9,      /* no common protocol version */
	OMST_EINTERNAL = -10,    /* daemon bug */
	OMST_EABORTED = -11,     /* request aborted (daemon shutting down) */
	OMST_ETIMEDOUT = -12,    /* a deadline expired */
	OMST_EUNAVAILABLE = -13, /* the name exists but its bytes can be had nowhere */
	OMST_EFORBIDDEN = -14,   /* this node's grid role or name prefixes, or the
	                          * caller's local rights, do not allow it */
	OMST_EINVAL = -100,      /* bad argument (NULL pointer, bad flags, ...) */
	OMST_ENODAEMON = -101,   /* no daemon answers at the socket */
	OMST_ECONN = -102,       /* connection lost during the call (daemon died) */
	OMST_EPROTO = -103,      /* the daemon sent something the protocol forbids */
	OMST_ENOMEM = -104,      /* out of memory */
	OMST_ESYS = -105,        /* a system call failed (see errno / omst_errmsg) */
	OMST_EMFILE = -106,      /* descriptor table full while receiving descriptors */
	OMST_EUNKNOWN = -107     /* a daemon error code this library does not know */
};

/* A blob's description (the protocol's Info). */
typedef struct omst_info {
	char name[OMST_NAME_MAX + 1]; /* NUL-terminated */
	char id[128];                 /* blob ID, a CIDv1 string */
	uint64_t size;                /* bytes */
	uint32_t chunk_size;          /* 0 if unknown on this node */
	uint32_t chunks;
	int64_t time_ns;              /* put time, unix nanoseconds */
	char origin[128];             /* peer ID of the node where it was put */
	uint32_t flags;               /* OMST_INFO_* */
} omst_info_t;

#define OMST_INFO_LOCAL 0x1u  /* every chunk is in this node's store */
#define OMST_INFO_PINNED 0x2u /* pinned on this node */

/* ---- OmniStorage API, on the default daemon -------------------------- */

/* Store size bytes at data under name. All or nothing: the name appears
 * only once every byte was sent and the upload ended; a put that fails
 * midway (connection lost, timeout, the process killed) leaves no name. */
int OmstPutData(const char *name, const void *data, size_t size);
/* Fill data with the blob named name; fails with OMST_ESIZE, filling
 * nothing that counts, when size is not the blob's size. */
int OmstGetData(const char *name, void *data, size_t size);
/* Store the file at path under name. The library opens path itself, with
 * the caller's rights (never the daemon's), and passes the descriptor to
 * the daemon (omst_put_fd). A symbolic link is followed only where Linux's
 * fs.protected_symlinks = 1 would follow it, whatever the host's setting:
 * not a link of another user in a sticky world-writable directory such as
 * /tmp (OMST_EIO, errno EACCES). A regular file that changes while it is
 * read fails the put (OMST_EIO), leaving no name; anything else (a FIFO,
 * /dev/stdin) is read to its end of file (opening a FIFO, by its path or
 * /dev/fd/N, waits for a writer's bytes at most OMST_TIMEOUT_MS, then
 * OMST_EIO with errno ETIMEDOUT, "no writer"); a directory is refused. Errors opening path are OMST_EIO with
 * errno set; messages name path. A relative path is taken against the
 * working directory. */
int OmstPutFile(const char *name, const char *path);
/* Write the blob to path, created by the library with the caller's rights
 * (links followed as OmstPutFile follows them: the target is written, not
 * the link). A regular file, or a path where nothing exists, is replaced
 * atomically: the bytes go into a new temporary file beside it
 * (".BASE.omst-RANDOM" where BASE is path's last component, with a
 * replaced file's permission bits, group where the caller is in it and,
 * as root, owner; new, mode 0644 less the umask), renamed onto path only
 * once every byte is written and verified; on any failure path is
 * unchanged and the temporary file removed. An existing FIFO or device
 * (/dev/null, a terminal) is written in place (opening a FIFO, by its path
 * or /dev/fd/N, waits for a reader at most OMST_TIMEOUT_MS, then OMST_EIO
 * with errno ETIMEDOUT, "no reader"; a FIFO of another user in a sticky world-writable directory is
 * refused); a directory is refused. */
int OmstGetFile(const char *name, const char *path);

/* ---- Handle API ------------------------------------------------------- */

/* A connection to one daemon. Thread-safe: calls from several threads on
 * one handle are allowed. After fork() the child's first call opens its
 * own connection (the parent's is never used by the child). */
typedef struct omst omst_t;

/* Connect to the daemon at socket_path (NULL: the default socket). No
 * daemon: OMST_ENODAEMON at once. */
int omst_connect(const char *socket_path, omst_t **out);
/* Close the handle (NULL is ignored). Pending async requests must have
 * been waited for. */
void omst_close(omst_t *h);

/* Puts are all or nothing, as OmstPutData and OmstPutFile. Files: see
 * OmstPutFile and OmstGetFile. */
int omst_put(omst_t *h, const char *name, const void *data, size_t size, omst_info_t *info);
/* chunk_size 0: the daemon's default; else 4096 .. 64 MiB. */
int omst_put_chunked(omst_t *h, const char *name, const void *data, size_t size, uint32_t chunk_size,
                     omst_info_t *info);
int omst_put_file(omst_t *h, const char *name, const char *path, omst_info_t *info);
/* Get into the caller's buffer; size must be the blob's size (OMST_ESIZE
 * otherwise). info may be NULL. */
int omst_get(omst_t *h, const char *name, void *buf, size_t size, omst_info_t *info);
int omst_get_file(omst_t *h, const char *name, const char *path, omst_info_t *info);
/* Store the contents of the caller's open file fd under name, read by the
 * daemon through a copy of the descriptor (protocol version 5, PUT_FD): a
 * regular file from fd's current offset to the size it has now, and it
 * must not change meanwhile (else OMST_EIO "file changed while it was
 * read", and no name); anything else (a pipe, a FIFO, a socket, a
 * terminal) to its end of file. fd must be open for reading, not a
 * directory (OMST_EINVAL). fd's offset moves; fd stays open. On a daemon
 * older than version 5 the library reads fd itself and streams the bytes
 * (PUT), with the same rules. info may be NULL. */
int omst_put_fd(omst_t *h, const char *name, int fd, omst_info_t *info);
/* Write the blob named name into the caller's open file fd, through a
 * copy of the descriptor (protocol version 5, GET_TO_FD): a regular file
 * not opened with O_APPEND then holds exactly the blob (written from
 * offset 0, cut to the blob's size); anything else (a pipe, a FIFO, a
 * terminal, O_APPEND) gets the bytes in order. On failure fd may hold part
 * of the bytes. fd must be open for writing, not a directory
 * (OMST_EINVAL); it stays open. On a daemon older than version 5 the
 * library receives the bytes (GET) and writes them itself, with the same
 * rules (SIGPIPE is not raised: a reader gone is OMST_EIO).
 * info may be NULL.
 *
 * While the daemon reads or writes fd, the wait for its reply (at most
 * OMST_TIMEOUT_MS without progress) goes on as long as a regular file's
 * offset, size or modification time changes; a stream shows no progress
 * the library can see, and is left to the daemon's own IO timeout, which
 * ends a stream that stops moving (OMST_ETIMEDOUT). */
int omst_get_to_fd(omst_t *h, const char *name, int fd, omst_info_t *info);

/* Follows a get into a file (a progress bar): called from the calling
 * thread with done, the bytes of the blob in the file so far, and size,
 * the blob's size. With a daemon of protocol version 8 (PROGRESS frames)
 * it is called as the daemon reports them, at most every 100 ms, with done
 * never going back, and last with done == size once every verified byte is
 * in the file (before the call returns 0); with an older daemon, once,
 * with done == size, when the get succeeded. A daemon that reports bytes
 * going back, beyond size, or ends without reporting size fails the get
 * with OMST_EPROTO. A non-zero return stops the get (the connection is
 * dropped, which cancels the request in the daemon; get_file leaves path
 * unchanged) and the call returns that value. */
typedef int (*omst_progress_cb)(void *arg, uint64_t done, uint64_t size);

/* omst_get_file and omst_get_to_fd with a progress callback (cb NULL: none). */
int omst_get_file_progress(omst_t *h, const char *name, const char *path, omst_progress_cb cb, void *arg,
                           omst_info_t *info);
int omst_get_to_fd_progress(omst_t *h, const char *name, int fd, omst_progress_cb cb, void *arg,
                            omst_info_t *info);
int omst_stat(omst_t *h, const char *name, omst_info_t *info);
/* Forget name on this node and unpin its blob here. */
int omst_remove(omst_t *h, const char *name);

/* Job namespaces (protocol version 6, docs/rpcbridge.md 6.13; an older
 * daemon: OMST_EVERSION). A prefix "job1" or "job1/" means the names under
 * "job1/"; an empty one, "/" or one with an empty, "." or ".." segment is
 * OMST_EINVALIDNAME (the daemon's message says which). The result may be
 * NULL; the whole JSON reply (with "failed", "rules") is omst_last_json(). */
#define OMST_EVERYWHERE 0x1u /* omst_remove_prefix: at every node of the grid */

typedef struct omst_rule_result {
	uint64_t removed;   /* names this node dropped */
	uint64_t reached;   /* nodes that took the rule, this one included */
	uint64_t unreached; /* neighbours it could not be passed to now */
	double ttl_seconds; /* omst_set_ttl: the TTL set */
	double seconds;     /* how long the daemon took */
} omst_rule_result_t;

/* Remove every name under prefix: on this node only (flags 0; a caller of
 * another uid removes only its own puts), or with OMST_EVERYWHERE at every
 * node of the grid and in the DHT, returning once every node reachable now
 * has applied it (nodes down now apply it when they return). */
int omst_remove_prefix(omst_t *h, const char *prefix, unsigned flags, omst_rule_result_t *res);
/* Give the names of scope (a prefix ending in '/', or one name) ttl_ns
 * nanoseconds to live, grid-wide (0 clears; at most a year). */
int omst_set_ttl(omst_t *h, const char *scope, uint64_t ttl_ns, omst_rule_result_t *res);

typedef struct omst_du {
	uint64_t names, blobs;
	uint64_t bytes;     /* the blobs' sizes, each blob once */
	uint64_t held;      /* bytes of their chunks stored here */
	uint64_t pinned;    /* of held: not evictable */
	uint64_t unpinned;  /* of held: evictable */
	uint64_t complete;  /* blobs held whole */
	uint64_t pinned_blobs;
} omst_du_t;

/* What prefix ("" for everything) holds on this node. */
int omst_du(omst_t *h, const char *prefix, omst_du_t *du);
/* The JSON reply of the calling thread's last successful
 * omst_remove_prefix, omst_set_ttl or omst_du, NUL-terminated; "" if
 * none. Valid until the thread's next such call. */
const char *omst_last_json(void);

/* A buffer the library provides: mapped from the daemon's files when the
 * daemon passes descriptors (zero-copy), else filled by copy. Read-only
 * unless OMST_BUF_WRITABLE was given (then writes are private to the
 * caller). Valid until omst_buf_release, also after omst_close. */
typedef struct omst_buf omst_buf_t;

#define OMST_BUF_COPY 0x1u     /* never zero-copy: receive the bytes */
#define OMST_BUF_WRITABLE 0x2u /* the caller may write into the buffer */

int omst_get_buf(omst_t *h, const char *name, unsigned flags, omst_buf_t **out);
const void *omst_buf_data(const omst_buf_t *b);
void *omst_buf_data_mut(omst_buf_t *b); /* NULL unless OMST_BUF_WRITABLE */
size_t omst_buf_size(const omst_buf_t *b);
int omst_buf_zero_copy(const omst_buf_t *b); /* 1 if mapped from the daemon's files */
const omst_info_t *omst_buf_info(const omst_buf_t *b);
void omst_buf_release(omst_buf_t *b); /* NULL is ignored */

/* Asynchronous get into the caller's buffer, to overlap the fetch with
 * compute: start, then test (non-blocking) or wait. The buffer must stay
 * valid and untouched until wait returns. Every started request must be
 * waited for exactly once; wait frees it. */
typedef struct omst_req omst_req_t;

int omst_get_start(omst_t *h, const char *name, void *buf, size_t size, omst_req_t **out);
/* *done = 1 when the request has finished (then wait returns at once). */
int omst_test(omst_req_t *r, int *done);
/* Wait for the request, free it, and return its result; info may be NULL. */
int omst_wait(omst_req_t *r, omst_info_t *info);

/* ---- Many names in one request (protocol version 7) -------------------- */

/* One entry of omst_get_many, as its callback sees it. */
typedef struct omst_entry {
	size_t index;            /* position in names */
	const char *name;        /* names[index] */
	int status;              /* 0, or the entry's own error (OMST_ENOTFOUND, ...) */
	const omst_info_t *info; /* the blob's info when status is 0, else NULL */
} omst_entry_t;

/* Called once per entry; data and size are the entry's verified bytes when
 * status is 0 (valid only during the call). A non-zero return stops
 * omst_get_many, which returns it (the connection is dropped). */
typedef int (*omst_entry_cb)(void *arg, const omst_entry_t *e, const void *data, size_t size);

/* Fetch names[0..n) in one request (GET_MANY): cb is called for each entry
 * in the order the daemon has them ready, from the calling thread. An
 * entry's error (a missing or refused name, a source that failed) is its
 * own: the others go on. Returns 0 when every entry was delivered (*failed,
 * if not NULL, counts those that failed), or the call's error (a bad name
 * among names: OMST_EINVALIDNAME before anything is sent; the connection
 * lost). On a daemon older than version 7, one GET per name. */
int omst_get_many(omst_t *h, const char *const *names, size_t n, omst_entry_cb cb, void *arg, size_t *failed);
/* Fetch names[i] into bufs[i] (sizes[i] bytes) in one request; status[i]
 * is 0 or the entry's error (OMST_ESIZE when the blob's size differs: the
 * buffer untouched; an entry that failed midway leaves its buffer with an
 * unspecified mix). Returns as omst_get_many. */
int omst_get_many_into(omst_t *h, const char *const *names, size_t n, void *const *bufs, const size_t *sizes,
                       int *status, size_t *failed);
/* Store data[i] (sizes[i] bytes) under names[i], for i < n, in one request
 * (PUT_MANY); each is stored or not on its own: status[i] is 0 or its error
 * (infos[i] its info if infos is not NULL). Returns 0 when the daemon
 * answered every item, else the call's error. On a daemon older than
 * version 7, one PUT per name. */
int omst_put_many(omst_t *h, const char *const *names, const void *const *data, const size_t *sizes, size_t n,
                  uint32_t chunk_size, int *status, omst_info_t *infos, size_t *failed);

/* A static description of code. */
const char *omst_strerror(int code);
/* The message of the calling thread's last failed call (the daemon's
 * message when it sent one); "" if none. */
const char *omst_errmsg(void);

#ifdef __cplusplus
}
#endif

#endif /* OMST_H */
