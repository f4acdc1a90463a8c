// Package localfile opens the files a local caller names in a put or a get,
// with the rights of the process that calls it and nobody else's: the omst
// CLI and the Go client open them and pass the descriptors to the daemon
// (rpcbridge PUT_FD, GET_TO_FD), and the daemon uses this package itself only
// for a caller of its own uid (the older PUT_FILE and GET_FILE requests).
//
// Symbolic links are followed the way Linux follows them with
// fs.protected_symlinks = 1, whatever that setting is on the host: a link in
// a sticky, world-writable directory (such as /tmp) is followed only if the
// follower owns it, or the directory's owner does. So a link planted in /tmp
// by another user (/tmp/out -> that user's victim's ~/.bashrc) is never
// followed, not for a read and not for a write; a link of one's own is.
// Every component of a path is checked, not only the last.
//
// Resolution and use are free of races on the last component: a path is
// resolved to one without links, its directory opened (and checked, through
// /proc/self/fd, to be the directory that was resolved), and the file opened,
// created and renamed relative to that directory with O_NOFOLLOW. The
// resolution of the directories above is checked the same way, after the
// fact: if a link appeared in one meanwhile, the call fails rather than
// follow it.
//
// A get's destination (Create) is written atomically when it is a regular
// file or does not exist yet: the bytes go into a new temporary file in the
// same directory, which Commit renames onto the destination (its link
// target, if a link was followed) and Abort removes. Anything else that
// exists (a FIFO, a character device such as /dev/null or a terminal) is
// opened and written in place, never replaced. Opening a FIFO waits for its
// other end, but no longer than the context: the wait is then ended by
// opening the other end for a moment, so no thread stays blocked.
package localfile
