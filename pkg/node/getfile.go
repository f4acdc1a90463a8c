package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// The temporary file a get writes before renaming it into place
// (.NAME.omst-123456) is an internal: errors name the destination (the
// caller adds it) and say what failed, not the temporary name.

// hideTemp returns err (from an operation op on the temporary file)
// without the file's name, keeping its cause (ENOSPC, EACCES, ...)
// reachable with errors.Is. nil stays nil.
func hideTemp(op string, err error) error {
	if err == nil {
		return nil
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", op, pe.Err)
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return fmt.Errorf("%s: %w", op, le.Err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// tempWriter writes to the temporary file; its errors do not name it. It
// hides the file's ReadFrom, so that io.Copy's errors from the reader (a
// fetch) and from the file stay apart.
type tempWriter struct{ f *os.File }

func (w tempWriter) Write(p []byte) (int, error) {
	k, err := w.f.Write(p)
	if err != nil {
		err = hideTemp("write", err)
	}
	return k, err
}
