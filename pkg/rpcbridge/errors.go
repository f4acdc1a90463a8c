package rpcbridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/omst-project/omst/pkg/blob"
)

// Code is the numeric error code of an ERROR frame. The numbers are part of
// the protocol (docs/rpcbridge.md); 0 is never sent.
type Code uint32

// Error codes.
const (
	CodeNotFound           Code = 1  // no such name (blob.ErrNotFound)
	CodeInvalidName        Code = 2  // name or prefix breaks the rules (blob.ErrInvalidName)
	CodeBadRequest         Code = 3  // malformed frame or field
	CodeIO                 Code = 4  // file system or stream IO error
	CodeNoSpace            Code = 5  // disk or cache full (blob.ErrNoSpace)
	CodeUnreachable        Code = 6  // a peer could not be reached (blob.ErrUnreachable)
	CodeCorrupt            Code = 7  // content does not match its hash (blob.ErrCorrupt, blob.ErrBadManifest)
	CodeSizeMismatch       Code = 8  // blob size differs from the expected one (blob.ErrSizeMismatch)
	CodeUnsupportedVersion Code = 9  // HELLO asked for a protocol version the server does not speak
	CodeInternal           Code = 10 // anything else
	CodeAborted            Code = 11 // the request was aborted (client ABORT, daemon shutting down)
	CodeTimeout            Code = 12 // a deadline expired
	CodeUnavailable        Code = 13 // the name exists but its bytes can be had nowhere (blob.ErrUnavailable)
	CodeForbidden          Code = 14 // this node's grid role or prefixes do not allow it (blob.ErrForbidden, which grid.ErrNotAllowed wraps)
)

var codeNames = [...]string{
	CodeNotFound: "NOT_FOUND", CodeInvalidName: "INVALID_NAME", CodeBadRequest: "BAD_REQUEST", CodeIO: "IO",
	CodeNoSpace: "NO_SPACE", CodeUnreachable: "UNREACHABLE", CodeCorrupt: "CORRUPT", CodeSizeMismatch: "SIZE_MISMATCH",
	CodeUnsupportedVersion: "UNSUPPORTED_VERSION", CodeInternal: "INTERNAL", CodeAborted: "ABORTED", CodeTimeout: "TIMEOUT",
	CodeUnavailable: "UNAVAILABLE", CodeForbidden: "FORBIDDEN",
}

func (c Code) String() string {
	if int(c) < len(codeNames) && codeNames[c] != "" {
		return codeNames[c]
	}
	return fmt.Sprintf("CODE_%d", uint32(c))
}

// sentinel returns the error that errors.Is matches for code c, or nil.
func (c Code) sentinel() error {
	switch c {
	case CodeNotFound:
		return blob.ErrNotFound
	case CodeInvalidName:
		return blob.ErrInvalidName
	case CodeNoSpace:
		return blob.ErrNoSpace
	case CodeUnreachable:
		return blob.ErrUnreachable
	case CodeCorrupt:
		return blob.ErrCorrupt
	case CodeSizeMismatch:
		return blob.ErrSizeMismatch
	case CodeAborted:
		return ErrAborted
	case CodeTimeout:
		return context.DeadlineExceeded
	case CodeUnavailable:
		return blob.ErrUnavailable
	case CodeForbidden:
		return blob.ErrForbidden
	}
	return nil
}

// Error is an error reply from the daemon (or a protocol error detected by
// the client, with CodeBadRequest).
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "omst daemon: " + e.Code.String()
	}
	return e.Message
}

// Is makes errors.Is work across the socket: an *Error matches the blob
// sentinel of its code (NOT_FOUND matches blob.ErrNotFound, FORBIDDEN
// blob.ErrForbidden, ...; TIMEOUT
// matches context.DeadlineExceeded, ABORTED matches ErrAborted), and any
// *Error with the same code.
func (e *Error) Is(target error) bool {
	if t, ok := target.(*Error); ok {
		return t.Code == e.Code
	}
	s := e.Code.sentinel()
	return s != nil && target == s
}

var (
	// ErrNoDaemon is wrapped by Dial's error when nothing listens on the
	// socket (it does not exist, or the daemon is gone).
	ErrNoDaemon = errors.New("no omst daemon")
	// ErrAborted is the error the Backend's put reader returns when the
	// client sent ABORT.
	ErrAborted = errors.New("put aborted by the client")
	// ErrUploadIncomplete is wrapped by the error the Backend's put reader
	// returns when the connection closes, fails or stays silent past the
	// server's IO timeout before the empty DATA frame that ends a PUT
	// upload (between frames or in the middle of one). The error's text
	// says where the stream stopped and how many bytes had arrived. It
	// never wraps io.EOF or io.ErrUnexpectedEOF: the upload is incomplete,
	// and the backend must store nothing.
	ErrUploadIncomplete = errors.New("upload incomplete: the closing empty DATA frame never came")
	// ErrClosed is returned by the methods of a closed Client.
	ErrClosed = errors.New("rpcbridge: client closed")
)

// CodeOf maps an error to the code sent for it: an *Error keeps its code;
// the blob sentinels map to their codes (blob.ErrBadManifest to CORRUPT);
// context.DeadlineExceeded to TIMEOUT; context.Canceled and ErrAborted to
// ABORTED; ENOSPC/EDQUOT to NO_SPACE; malformed frames and blobs too big for
// their chunk size (blob.ErrTooBig) to BAD_REQUEST; other
// file system and stream errors (ErrUploadIncomplete included) to IO;
// anything else to INTERNAL. CodeOf(nil) is 0.
func CodeOf(err error) Code {
	var e *Error
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return e.Code
	case errors.Is(err, blob.ErrForbidden):
		return CodeForbidden
	case errors.Is(err, blob.ErrUnavailable): // before ErrNotFound, which it may wrap too
		return CodeUnavailable
	case errors.Is(err, blob.ErrNotFound):
		return CodeNotFound
	case errors.Is(err, blob.ErrInvalidName):
		return CodeInvalidName
	case errors.Is(err, blob.ErrNoSpace), errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return CodeNoSpace
	case errors.Is(err, blob.ErrUnreachable):
		return CodeUnreachable
	case errors.Is(err, blob.ErrCorrupt), errors.Is(err, blob.ErrBadManifest):
		return CodeCorrupt
	case errors.Is(err, blob.ErrSizeMismatch):
		return CodeSizeMismatch
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return CodeTimeout
	case errors.Is(err, context.Canceled), errors.Is(err, ErrAborted):
		return CodeAborted
	case errors.Is(err, errMalformed), errors.Is(err, blob.ErrTooBig):
		return CodeBadRequest
	}
	var pe *fs.PathError
	var le *os.LinkError
	var errno syscall.Errno
	if errors.As(err, &pe) || errors.As(err, &le) || errors.As(err, &errno) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.ErrShortWrite) || errors.Is(err, ErrUploadIncomplete) {
		return CodeIO
	}
	return CodeInternal
}

// errorFor returns err as an *Error (with CodeOf's code and err's text).
func errorFor(err error) *Error {
	var e *Error
	if errors.As(err, &e) && e.Error() == err.Error() {
		return e
	}
	return &Error{Code: CodeOf(err), Message: err.Error()}
}
