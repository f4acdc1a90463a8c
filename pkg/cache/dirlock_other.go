//go:build !unix

package cache

// withDirLock runs f; without flock, the caller relies on Badger's own lock.
func withDirLock(_ string, f func() error) error { return f() }
