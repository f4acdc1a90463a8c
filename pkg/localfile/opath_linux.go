package localfile

import "golang.org/x/sys/unix"

// oPath opens a directory only to name it in *at calls (no read right
// needed).
const oPath = unix.O_PATH
