//go:build linux

package main

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
)

// payload returns a reader of n deterministic pseudo-random bytes: the
// same bytes as the omst plan's (testplans/omst/payload.go) for the same
// seed and stream, so that both baselines move the same blob.
func payload(seed, stream int64, n int64) io.Reader {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[0:], uint64(seed))
	binary.LittleEndian.PutUint64(key[8:], uint64(stream))
	copy(key[16:], "omst-testplan")
	return io.LimitReader(rand.NewChaCha8(key), n)
}

// writePayload writes the broadcast's bytes to path and returns their
// SHA-256 (hex).
func writePayload(path string, seed, n int64) (string, error) {
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	w, err := io.Copy(io.MultiWriter(f, h), payload(seed, 0, n))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && w != n {
		err = fmt.Errorf("wrote %d bytes, want %d", w, n)
	}
	if err != nil {
		return "", fmt.Errorf("payload %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hashFile returns the size and SHA-256 (hex) of the file at path.
func hashFile(path string) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return n, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}
