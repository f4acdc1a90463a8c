//go:build linux

package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"github.com/omst-project/omst/internal/payload"
)

// writePayload writes the broadcast's bytes to path and returns their
// SHA-256 (hex).
func writePayload(path string, seed, n int64) (string, error) {
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	w, err := io.Copy(io.MultiWriter(f, h), payload.Reader(seed, 0, n)) // the omst plan's bytes for the same seed
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
