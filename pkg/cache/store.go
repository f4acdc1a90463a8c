package cache

import (
	"container/list"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/table"
	"github.com/shirou/gopsutil/v4/disk"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/namespace"
)

// MinDefaultMaxBytes is the floor of the default size cap (Options.MaxBytes == 0).
const MinDefaultMaxBytes = 64 << 20

// flushInterval is how often last-use and presence changes of chunks are
// written to the index in the background.
const flushInterval = 5 * time.Second

// flushThreshold triggers an early background flush once this many chunk
// entries are dirty.
const flushThreshold = 4096

// valueLogGCInterval is how often Badger's value log is garbage collected
// when the index is not compacted (after a compaction it always is).
const valueLogGCInterval = 10 * time.Minute

// compactInterval is how often the index's compaction loop looks whether
// a compaction is due (a look is a few microseconds).
const compactInterval = time.Second

// maxValueLogGC bounds the value log files one garbage collection rewrites.
const maxValueLogGC = 8

// indexL0Tables is the number of level-0 tables at which the flush loop
// compacts the index (compactIndex): Badger's own threshold when its
// compactors ran (NumLevelZeroTables was 2).
const indexL0Tables = 2

// indexL0MaxTables is the number of level-0 tables at which the flush loop
// compacts the index however large the levels below are (Badger stalls
// writes at 15).
const indexL0MaxTables = 8

// compactDue reports whether the flush loop compacts the index, whose
// level 0 holds l0Tables tables of l0Bytes and whose levels below hold
// below bytes, all of which a compaction rewrites (compactIndex): at
// indexL0Tables tables once they hold at least a quarter of below (so a
// compaction writes at most 5 times what was added since the last one,
// and a growing index is rewritten a bounded number of times per byte),
// and at indexL0MaxTables tables whatever their size.
func compactDue(l0Tables int, l0Bytes, below int64) bool {
	switch {
	case l0Tables < indexL0Tables:
		return false
	case l0Tables >= indexL0MaxTables:
		return true
	}
	return 4*l0Bytes >= below
}

// indexMemTableSize is the index's memtable size, a level-0 table's worth
// of writes (a variable so that a test can make tables of less).
var indexMemTableSize int64 = 16 << 20

// indexValueThreshold is Badger's ValueThreshold for the index: a value
// of at least this many bytes lives in the value log, the LSM tree holding
// only a pointer to it. Chunk outboards (about 4 KiB per 1 MiB chunk) and
// manifests of more than 32 chunks go there; chunk entries, records and
// pins stay in the tree. With outboards in the tree (Badger's default, 1
// MiB) the tree held 4.3 KB per chunk, a level-0 table per 4,000 chunks
// written, and every compaction (compactIndex) rewrote all of it:
// BenchmarkIndexFill. A variable so that a test can write a store in that
// earlier layout.
var indexValueThreshold int64 = 1 << 10

// indexValueLogFileSize is the size of a value log file, the unit that
// its garbage collection rewrites (a variable so that a test can make
// smaller ones).
var indexValueLogFileSize int64 = 64 << 20

// indexCompactors is the number of Badger's own compactors the index runs
// (0: the flush loop compacts it, compactIndex); a variable so that
// BenchmarkIndexFill can weigh the alternative.
var indexCompactors = 0

// indexStats is what the flush loop measured of the index's upkeep.
type indexStats struct {
	compactions  int           // compactIndex's Flattens
	compactTime  time.Duration // their total time
	maxCompact   time.Duration // the longest
	compactBytes int64         // bytes of the tables they wrote
	maxRound     time.Duration // the longest flush of the flush loop
	gcRewrites   int           // value log files rewritten by RunValueLogGC
}

// ErrLocked is returned (wrapped) by Open when another process holds the
// store's index open.
var ErrLocked = errors.New("store is in use by another process")

// Options configure Open.
type Options struct {
	// MaxBytes caps the bytes of chunk data kept on disk. 0 selects the
	// default: 25% of the free disk space at the store's directory when it
	// is opened (counting the space of the chunks it already holds as
	// free), and at least MinDefaultMaxBytes. A negative value is an error.
	MaxBytes int64
	// Logger receives the store's warnings (and Badger's). nil discards them.
	Logger *slog.Logger
	// Sync makes Ingest durable before it returns: the chunk files it wrote
	// and their directory entries reach the disk (syncfs of the store's
	// file system) before the record is committed, and the commit is synced
	// after, so a put that returned survives a power loss. Without it a
	// crash of the machine (not of the process) can lose the most recent
	// puts: Open then finds them absent, or their missing chunks dropped.
	// Chunks fetched from peers are never synced: they can be fetched again.
	Sync bool
	// VerifiedMemoBytes bounds the memory that keeps the bytes of recently
	// verified chunks (read from disk and verified, or arrived verified
	// from a peer), so that a chunk served to several readers is read and
	// verified once. 0 selects DefaultVerifiedMemoBytes; negative keeps
	// none (every read goes to the disk and is verified).
	VerifiedMemoBytes int
	// Now is the clock the namespace rules' TTLs are judged by (rules.go);
	// nil is time.Now.
	Now func() time.Time
	// ChunkOutboard, if set, hashes a chunk for Ingest and returns its
	// hash with the chunk's outboard (pkg/transfer.ChunkOutboard: the
	// inner nodes of its BLAKE3 tree, whose root is the hash), which the
	// store keeps with the chunk (PutOutboard), so that the chunk can be
	// served in verified pieces without hashing it again. It must return
	// blob.HashChunk(data) as the hash. nil: Ingest hashes with
	// blob.HashChunk and keeps no outboard.
	ChunkOutboard func(data []byte) (blob.Hash, []byte)
}

// Usage is a snapshot of the store's accounting. Byte counts are chunk
// payload bytes (file sizes), not disk blocks.
type Usage struct {
	UsedBytes   int64 // bytes of all stored chunks
	CapBytes    int64 // the size cap
	PinnedBytes int64 // bytes of stored chunks that cannot be evicted (pinned, or held by an ingest in progress)
	// OrphanedBytes are bytes of stored chunks that no stored manifest
	// lists: a put's until its commit, or left by uploads that never
	// completed in a store of an older version (puts into chunk files).
	// They are never pinned and are evicted first.
	OrphanedBytes int64
	Chunks        int // number of stored chunks
	// DamagedChunks counts the chunks found damaged (bytes not matching
	// their hash, a file truncated or missing) and dropped since Open.
	DamagedChunks uint64
	// Evictions and EvictedBytes count the chunks (and their bytes)
	// evicted to make room since Open; PinnedBlobs is the number of
	// pinned blobs.
	Evictions, EvictedBytes uint64
	PinnedBlobs             int
}

// Store is the node-local blob store: chunk bytes in content-addressed files
// under DIR/chunks or in blob files under DIR/blobs, and a Badger index
// under DIR/index holding name records (with history), manifests, chunk
// sizes and last use, and pins. Chunk bytes
// are bounded by a size cap; the least recently used unpinned chunks are
// evicted to make room. All methods are safe for concurrent use.
type Store struct {
	sync     bool                                   // Options.Sync
	seal     func(blob.Record) (blob.Record, error) // SetSeal
	dir      string
	chunkDir string
	tmpDir   string
	blobDir  string
	db       *badger.DB
	log      *slog.Logger

	// metaMu serializes every index mutation of names, manifests and pins,
	// so read-modify-write transactions never conflict and the in-memory
	// pin state changes in the same order as the index.
	metaMu sync.Mutex

	// mu guards everything below.
	mu          sync.Mutex
	chunks      map[blob.Hash]*chunkEntry
	lru         *list.List // of *chunkEntry: present, unpinned, unheld chunks; front = most recently used
	pinCount    map[blob.Hash]int32
	pins        map[string]*pinnedBlob         // by cid.KeyString
	owned       map[string]map[string]struct{} // owner -> keys of the pins it holds (pins' owners, inverted)
	used        int64
	reserved    int64 // bytes of chunk writes in progress
	pinnedBytes int64
	orphanBytes int64 // bytes of entries marked orphan
	damaged     uint64
	capBytes    int64
	dirty       map[blob.Hash]struct{} // chunk entries whose index record is stale
	// obPending holds the outboards given to PutOutboard that the next
	// flush writes to the index (keyOutboard) with their chunk's entry.
	obPending map[blob.Hash][]byte
	// chunkOutboard is Options.ChunkOutboard (nil: ingest hashes only).
	chunkOutboard func(data []byte) (blob.Hash, []byte)
	closed        bool
	sinks         map[blob.Hash]*Sink // the open sink that receives each chunk (blobfile.go)
	punchFiles    []*blobFile         // the blob files with a punching descriptor open (blobFile.wf), oldest first

	// evictions and evictedBytes (under mu) count chunks evicted to make room
	// (Usage.Evictions, Usage.EvictedBytes).
	evictions, evictedBytes uint64

	// verified keeps the bytes of recently verified chunks (never modified
	// by anyone); manifests keeps recently used decoded manifests (never
	// modified by callers). Both are content-addressed, so never stale.
	verified  *memo[blob.Hash, []byte]
	manifests *memo[string, *blob.Manifest]

	// rules are the namespace rules held (rules.go), guarded by rulesMu
	// (taken after metaMu, never with mu); now is Options.Now.
	rulesMu sync.RWMutex
	rules   *namespace.Set
	now     func() time.Time

	flushMu   sync.Mutex // serializes flushes, so a later flush always wins
	ixMu      sync.Mutex // guards ix
	ix        indexStats
	flushKick chan struct{}
	stop      context.CancelFunc
	flushDone chan struct{}
	// compactMu serializes compactIndex; stopCompact ends compactLoop,
	// which then closes compactDone. Close stops it last: its flush may
	// wait for a compaction.
	compactMu   sync.Mutex
	stopCompact context.CancelFunc
	compactDone chan struct{}
}

// chunkEntry is the in-memory state of one stored chunk.
type chunkEntry struct {
	hash    blob.Hash
	size    int64
	lastUse int64         // unix nanoseconds
	elem    *list.Element // in Store.lru; nil while pinned or held
	orphan  bool          // no stored manifest lists it (see Usage.OrphanedBytes)
	// bf, off: the chunk's bytes are at off in a blob file (a get's
	// destination shared with the store) instead of in a chunk file.
	bf  *blobFile
	off int64
}

// pinnedBlob is the in-memory state of one pinned blob.
type pinnedBlob struct {
	owners map[string]struct{} // "" = pinned by Pin; else the name that pinned it at ingest
	chunks []blob.Hash         // distinct chunk hashes of its manifest
}

// Index key prefixes.
const (
	keyChunk    = "c/" // + hash (32 bytes)      -> size u64, lastUse i64
	keyManifest = "m/" // + CID bytes            -> encoded manifest
	keyPin      = "p/" // + CID bytes            -> owners (u16 len + bytes)*
	keyRecord   = "r/" // + name                 -> encoded current record
	keyHistory  = "h/" // + name + 0x00 + 16 B   -> encoded record
	keyRoute    = "t/" // + name                 -> peer ID the current record came from
	keyUser     = "u/" // + name                 -> u32 uid of the local user that put the current record here
	keyRule     = "x/" // + kind u8 + scope      -> encoded namespace rule (rules.go)
	keyVersion  = "v"  //                        -> format version u32
	keyOutboard = "o/" // + hash (32 bytes)      -> the chunk's outboard (PutOutboard), written and deleted with its chunk entry
)

// indexVersion 2: records are encoded without via (blob record version 2);
// a name's via is its route (keyRoute). Open migrates version 1.
const indexVersion = 2

// SetSeal sets a function that completes every record a put makes here,
// before it is stored (pkg/member's proof, in a closed grid); an error
// from it fails the put, storing no record. Set it before the first put.
func (s *Store) SetSeal(f func(blob.Record) (blob.Record, error)) { s.seal = f }

// Open opens (creating if needed) the store in dir. It removes temp files
// left by an earlier process and reconciles the index with the chunk files on
// disk: files without an index entry are adopted (oldest in LRU order),
// entries whose file is missing are dropped. If another process has the
// store open it returns an error wrapping ErrLocked.
func Open(dir string, opts Options) (*Store, error) {
	if opts.MaxBytes < 0 {
		return nil, fmt.Errorf("open store %s: negative MaxBytes %d", dir, opts.MaxBytes)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{
		sync:          opts.Sync,
		dir:           dir,
		chunkDir:      filepath.Join(dir, "chunks"),
		tmpDir:        filepath.Join(dir, "tmp"),
		blobDir:       filepath.Join(dir, "blobs"),
		log:           log,
		chunks:        make(map[blob.Hash]*chunkEntry),
		verified:      newMemo[blob.Hash, []byte](verifiedMemoBytes(opts.VerifiedMemoBytes)),
		manifests:     newMemo[string, *blob.Manifest](manifestMemoBytes),
		lru:           list.New(),
		pinCount:      make(map[blob.Hash]int32),
		pins:          make(map[string]*pinnedBlob),
		owned:         make(map[string]map[string]struct{}),
		dirty:         make(map[blob.Hash]struct{}),
		obPending:     make(map[blob.Hash][]byte),
		chunkOutboard: opts.ChunkOutboard,
		capBytes:      opts.MaxBytes,
		now:           opts.Now,
		flushKick:     make(chan struct{}, 1),
		flushDone:     make(chan struct{}),
		compactDone:   make(chan struct{}),
	}
	for _, d := range []string{dir, s.chunkDir, s.tmpDir, s.blobDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("open store: create %s: %w", d, err)
		}
	}
	if err := s.makeShards(); err != nil {
		return nil, err
	}
	var diskFree int64 = -1
	if s.capBytes == 0 {
		u, err := disk.Usage(dir)
		if err != nil {
			return nil, fmt.Errorf("open store %s: free space for the default size cap: %w", dir, err)
		}
		diskFree = int64(u.Free)
	}
	// Badger first: its directory lock keeps a second process from
	// deleting the temp files of the one that runs.
	bopts := badger.DefaultOptions(filepath.Join(dir, "index")).
		WithLogger(badgerLogger{log}).
		WithMemTableSize(indexMemTableSize).
		WithNumMemtables(2).
		WithBlockCacheSize(16 << 20).
		WithValueLogFileSize(indexValueLogFileSize).
		WithValueThreshold(indexValueThreshold).
		// No compactors: each of Badger's wakes every 50 ms whether
		// there is work or not (two were 85% of an idle daemon's CPU,
		// 0.45% of a core each); the flush loop compacts instead
		// (compactIndex).
		WithNumCompactors(indexCompactors).
		WithMetricsEnabled(false)
	if indexCompactors == 0 {
		// Only Flatten scores level 0 now: by this, indexL0Tables
		// tables alone in the index are past its threshold.
		bopts = bopts.WithNumLevelZeroTables(1)
	}
	if err := withDirLock(bopts.Dir, func() error { return checkIndexTables(bopts.Dir, bopts) }); err != nil {
		if errors.Is(err, ErrIndexDamaged) {
			return nil, fmt.Errorf("open store %s: %w; %s", dir, err, damagedIndexHelp(bopts.Dir))
		}
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	db, err := badger.Open(bopts)
	if err != nil {
		if strings.Contains(err.Error(), "Cannot acquire directory lock") {
			return nil, fmt.Errorf("open store %s: %w (index %s is locked: is another omst daemon running with this home?)",
				dir, ErrLocked, bopts.Dir)
		}
		if isNoSpace(err) || errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("open store %s: open index: %w", dir, noSpace(err))
		}
		return nil, fmt.Errorf("open store %s: open index: %w; if it is damaged, %s", dir, err, damagedIndexHelp(bopts.Dir))
	}
	s.db = db
	if err := s.loadRecovering(); err != nil {
		db.Close()
		if errors.Is(err, ErrIndexDamaged) {
			return nil, fmt.Errorf("open store %s: %w; %s", dir, err, damagedIndexHelp(bopts.Dir))
		}
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	s.mu.Lock()
	if diskFree >= 0 {
		// The store's own chunks count as free space, so that the default
		// cap does not shrink every time a filled store is reopened.
		s.capBytes = max((diskFree+s.used)/4, MinDefaultMaxBytes)
	}
	if err := s.evictLocked(0); err != nil {
		s.log.Warn("store holds more pinned data than its cap", "used", s.used, "pinned", s.pinnedBytes, "cap", s.capBytes)
	}
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	go s.flushLoop(ctx)
	cctx, ccancel := context.WithCancel(context.Background())
	s.stopCompact = ccancel
	go s.compactLoop(cctx)
	return s, nil
}

// loadRecovering is load, with a panic of the index code (a damaged block
// that passed the table checks) turned into an error wrapping
// ErrIndexDamaged.
func (s *Store) loadRecovering() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: reading it failed: %v", ErrIndexDamaged, firstLine(fmt.Sprint(r)))
		}
	}()
	return s.load()
}

// load rebuilds the in-memory state from the index and the chunk files.
func (s *Store) load() error {
	if err := s.checkVersion(); err != nil {
		return err
	}
	if err := s.loadRules(); err != nil {
		return err
	}
	if err := clearDir(s.tmpDir); err != nil {
		return fmt.Errorf("remove temp files: %w", err)
	}
	// Chunk entries from the index.
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(keyChunk), PrefetchValues: true, PrefetchSize: 256})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			k := item.Key()
			if len(k) != len(keyChunk)+blob.HashSize {
				continue
			}
			var h blob.Hash
			copy(h[:], k[len(keyChunk):])
			err := item.Value(func(v []byte) error {
				if len(v) != 16 {
					return nil
				}
				s.chunks[h] = &chunkEntry{hash: h, size: int64(binary.BigEndian.Uint64(v)), lastUse: int64(binary.BigEndian.Uint64(v[8:]))}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("load chunk index: %w", err)
	}
	// Reconcile with the files.
	seen := make(map[blob.Hash]bool, len(s.chunks))
	adopted := 0
	err = filepath.WalkDir(s.chunkDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		h, perr := blob.ParseHash(d.Name())
		if perr != nil {
			s.log.Warn("removing stray file in chunk directory", "path", path)
			return os.Remove(path)
		}
		if want := s.chunkPath(h); path != want {
			// A chunk at another path (an older layout): move it; the
			// walk may or may not visit it again at its new place.
			if seen[h] {
				return os.Remove(path)
			}
			if err := os.Rename(path, want); err != nil {
				return fmt.Errorf("move %s to %s: %w", path, want, err)
			}
			path = want
		}
		seen[h] = true
		if _, ok := s.chunks[h]; ok {
			return nil
		}
		info, ierr := os.Stat(path) // not d.Info(): the file may have moved
		if ierr != nil {
			return ierr
		}
		if info.Size() <= 0 || info.Size() > blob.MaxChunkSize {
			return os.Remove(path)
		}
		s.chunks[h] = &chunkEntry{hash: h, size: info.Size(), lastUse: info.ModTime().UnixNano()}
		s.dirty[h] = struct{}{}
		adopted++
		return nil
	})
	if err != nil {
		return fmt.Errorf("scan chunk files: %w", err)
	}
	inBlobs, punched, err := s.loadBlobFiles(seen)
	if err != nil {
		return fmt.Errorf("scan blob files: %w", err)
	}
	adopted += inBlobs
	dropped := 0
	for h := range s.chunks {
		if !seen[h] {
			delete(s.chunks, h)
			s.dirty[h] = struct{}{}
			if !punched[h] { // punched out of a put's file: evicted before the crash
				dropped++
			}
		}
	}
	// An indexed chunk's file was renamed into place before its entry was
	// written, so a missing file is damage (deleted behind our back).
	s.damaged += uint64(dropped)
	if adopted+dropped > 0 {
		s.log.Warn("chunk index reconciled with files", "adopted", adopted, "dropped", dropped)
	}
	// Pins.
	err = s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(keyPin), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().KeyCopy(nil)
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			m, err := getManifest(txn, k[len(keyPin):])
			if err != nil {
				return fmt.Errorf("manifest of pinned blob: %w", err)
			}
			s.pins[string(k[len(keyPin):])] = &pinnedBlob{owners: decodeOwners(v), chunks: distinct(m.Chunks)}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("load pins: %w", err)
	}
	for k, p := range s.pins {
		for _, h := range p.chunks {
			s.pinCount[h]++
		}
		for o := range p.owners {
			s.indexOwner(o, k)
		}
	}
	if err := s.markOrphans(); err != nil {
		return fmt.Errorf("find orphaned chunks: %w", err)
	}
	// Totals and the LRU list: orphans at the back (evicted first), then
	// the rest, oldest at the back.
	free := make([]*chunkEntry, 0, len(s.chunks))
	for h, e := range s.chunks {
		s.used += e.size
		if e.orphan {
			s.orphanBytes += e.size
		}
		if s.pinCount[h] > 0 {
			s.pinnedBytes += e.size
		} else {
			free = append(free, e)
		}
	}
	sort.Slice(free, func(i, j int) bool {
		if free[i].orphan != free[j].orphan {
			return free[i].orphan
		}
		return free[i].lastUse < free[j].lastUse
	})
	for _, e := range free {
		e.elem = s.lru.PushFront(e)
	}
	if s.orphanBytes > 0 {
		s.log.Warn("store holds chunks that no manifest lists (left by uploads that did not complete); they are evicted first",
			"bytes", s.orphanBytes)
	}
	return nil
}

// markOrphans marks every chunk entry that no stored manifest lists.
func (s *Store) markOrphans() error {
	for _, e := range s.chunks {
		e.orphan = true
	}
	return s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(keyManifest), PrefetchValues: true, PrefetchSize: 64})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			err := it.Item().Value(func(v []byte) error {
				m, err := blob.DecodeManifest(v)
				if err != nil {
					s.log.Warn("undecodable manifest in the index", "key", fmt.Sprintf("%x", it.Item().Key()), "err", err)
					return nil
				}
				for _, h := range m.Chunks {
					if e := s.chunks[h]; e != nil {
						e.orphan = false
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// verifiedMemoBytes turns Options.VerifiedMemoBytes into the memo's bound.
func verifiedMemoBytes(n int) int {
	switch {
	case n == 0:
		return DefaultVerifiedMemoBytes
	case n < 0:
		return 0
	}
	return n
}

// checkVersion sets the index version of a new index, migrates an index
// of version 1, and refuses any other version.
func (s *Store) checkVersion() error {
	var v []byte
	err := s.db.Update(func(txn *badger.Txn) error {
		item, err := txn.Get([]byte(keyVersion))
		if errors.Is(err, badger.ErrKeyNotFound) {
			v = binary.BigEndian.AppendUint32(nil, indexVersion)
			return txn.Set([]byte(keyVersion), v)
		}
		if err != nil {
			return err
		}
		v, err = item.ValueCopy(nil)
		return err
	})
	if err != nil {
		return fmt.Errorf("read index version: %w", err)
	}
	switch {
	case len(v) == 4 && binary.BigEndian.Uint32(v) == indexVersion:
		return nil
	case len(v) == 4 && binary.BigEndian.Uint32(v) == 1:
		return s.migrateV1()
	}
	return fmt.Errorf("index format version %x unsupported (want %d)", v, indexVersion)
}

// Close flushes pending last-use information and closes the index. Chunk
// writes in progress should have finished; other methods must not be called
// afterwards. A second Close returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.stop()
	<-s.flushDone
	ferr := s.flush()
	s.closePunchFiles()
	s.stopCompact()
	<-s.compactDone
	cerr := s.db.Close()
	if ferr != nil {
		return fmt.Errorf("close store %s: %w", s.dir, ferr)
	}
	if cerr != nil {
		return fmt.Errorf("close store %s: close index: %w", s.dir, cerr)
	}
	return nil
}

// Usage returns the current space accounting.
func (s *Store) Usage() Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Usage{UsedBytes: s.used, CapBytes: s.capBytes, PinnedBytes: s.pinnedBytes, OrphanedBytes: s.orphanBytes,
		Chunks: len(s.chunks), DamagedChunks: s.damaged, Evictions: s.evictions, EvictedBytes: s.evictedBytes, PinnedBlobs: len(s.pins)}
}

// Dir returns the directory the store lives in.
func (s *Store) Dir() string { return s.dir }

// flushLoop writes dirty chunk entries to the index every flushInterval or
// when kicked, and collects the value log, until ctx ends.
func (s *Store) flushLoop(ctx context.Context) {
	defer close(s.flushDone)
	t := time.NewTicker(flushInterval)
	defer t.Stop()
	gc := gcState{last: time.Now()}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.flushKick:
		}
		s.flushRound(ctx, &gc)
	}
}

// compactLoop compacts the index when due (compactIndex), looking every
// compactInterval, until ctx ends. It is not the flush loop: a write
// (the flush's, a put's) that meets Badger's stall at 15 level-0 tables
// waits for a compaction, and with the index's only compaction in the
// flush loop, a flush that wrote that many tables itself waited forever
// (BenchmarkIndexFill with outboards in the tree hung at 256 Ki chunks:
// a flush of a backlog that grew during a long Flatten;
// TestFlushOfManyTablesCompletes). This loop never writes through
// Badger's write path, so nothing it waits for waits for it.
func (s *Store) compactLoop(ctx context.Context) {
	defer close(s.compactDone)
	t := time.NewTicker(compactInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := s.compactIndex(); err != nil {
			s.log.Warn("compact chunk index", "err", err)
		}
	}
}

// gcState is the flush loop's memory of its last value log collection.
type gcState struct {
	last        time.Time // when
	compactions int       // indexStats.compactions then
}

// flushRound is one round of the flush loop: flush the dirty chunk
// entries, then collect the value log if the index was compacted since
// the last collection or valueLogGCInterval has passed.
func (s *Store) flushRound(ctx context.Context, gc *gcState) {
	s.closePunchFiles() // opened again by the next punch; none open at rest
	start := time.Now()
	if err := s.flush(); err != nil {
		s.log.Warn("flush chunk index", "err", err)
	}
	took := time.Since(start)
	// The value log holds outboards and large manifests; those of
	// chunks evicted or blobs dropped are garbage there. Badger learns
	// how much of each file is garbage when it compacts, so look after
	// each compaction (as often as the index takes writes: a churning
	// cache reclaims as it goes), and now and then anyway.
	if n := s.indexStats().compactions; n != gc.compactions || time.Since(gc.last) >= valueLogGCInterval {
		gc.last, gc.compactions = time.Now(), n
		s.valueLogGC(ctx)
	}
	s.ixMu.Lock()
	s.ix.maxRound = max(s.ix.maxRound, took)
	s.ixMu.Unlock()
}

// valueLogGC rewrites the value log files that are at least half garbage,
// at most maxValueLogGC of them (each at most 64 MiB, its live half
// written again), until Badger finds none or ctx ends.
func (s *Store) valueLogGC(ctx context.Context) {
	for i := 0; i < maxValueLogGC && ctx.Err() == nil; i++ {
		if s.db.RunValueLogGC(0.5) != nil { // ErrNoRewrite: nothing to reclaim
			return
		}
		s.ixMu.Lock()
		s.ix.gcRewrites++
		s.ixMu.Unlock()
	}
}

// compactIndex merges the index into one level once compactDue says so
// (Badger's Flatten); until then it does nothing. The
// index runs no compactors of its own (see Open) and takes few writes: a
// level-0 table per indexMemTableSize of them (a chunk's entry and its
// outboard's pointer into the value log: a level-0 table per ~70,000
// chunks written; entries rewritten when a chunk's last use is flushed),
// and Badger stalls writes only at 15 level-0 tables, so a look every
// compactInterval keeps it compact. Flatten rewrites every level, and the
// chunk hashes spread every table over the whole key range: each
// compaction rewrites the whole tree (about 100 bytes per chunk stored).
// That is why outboards live in the value log (indexValueThreshold): in
// the tree they made it 4.3 KB per chunk and a table per 4,000 chunks.
// It reports whether it compacted.
func (s *Store) compactIndex() (compacted bool, err error) {
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	lv := s.db.Levels()
	if indexCompactors > 0 || len(lv) == 0 {
		return false, nil
	}
	var below int64
	for _, l := range lv[1:] {
		below += l.Size
	}
	if !compactDue(lv[0].NumTables, lv[0].Size, below) {
		return false, nil
	}
	start := time.Now()
	had := make(map[uint64]bool)
	for _, t := range s.db.Tables() {
		had[t.ID] = true
	}
	if err := s.db.Flatten(1); err != nil {
		return false, fmt.Errorf("flatten (%d level-0 tables): %w", lv[0].NumTables, err)
	}
	took := time.Since(start)
	var written int64 // the new tables' file sizes (TableInfo.OnDiskSize counts the values in the value log too)
	for _, t := range s.db.Tables() {
		if had[t.ID] {
			continue
		}
		if info, err := os.Stat(table.NewFilename(t.ID, s.db.Opts().Dir)); err == nil {
			written += info.Size()
		}
	}
	s.ixMu.Lock()
	s.ix.compactions++
	s.ix.compactTime += took
	s.ix.maxCompact = max(s.ix.maxCompact, took)
	s.ix.compactBytes += written
	s.ixMu.Unlock()
	return true, nil
}

// indexStats returns what the flush loop measured of the index's upkeep.
func (s *Store) indexStats() indexStats {
	s.ixMu.Lock()
	defer s.ixMu.Unlock()
	return s.ix
}

// markDirtyLocked records that h's index entry is stale. s.mu must be held.
func (s *Store) markDirtyLocked(h blob.Hash) {
	s.dirty[h] = struct{}{}
	if len(s.dirty) == flushThreshold {
		select {
		case s.flushKick <- struct{}{}:
		default:
		}
	}
}

// flush writes the dirty chunk entries (presence, size, last use, or
// deletion) to the index in one batch.
func (s *Store) flush() error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.mu.Lock()
	if len(s.dirty) == 0 {
		s.mu.Unlock()
		return nil
	}
	ups := make([]chunkUpdate, 0, len(s.dirty))
	var held []blob.Hash // in a blob file not committed yet (blobfile.go)
	for h := range s.dirty {
		u := chunkUpdate{h: h}
		if e, ok := s.chunks[h]; ok {
			if e.bf != nil && !e.bf.committed {
				held = append(held, h)
				continue
			}
			u.val = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(make([]byte, 0, 16), uint64(e.size)), uint64(e.lastUse))
			u.ob = s.obPending[h]
		} else {
			delete(s.obPending, h)
		}
		ups = append(ups, u)
	}
	clear(s.dirty)
	for _, h := range held {
		s.dirty[h] = struct{}{}
	}
	s.mu.Unlock()
	if len(ups) == 0 {
		return nil
	}
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	for _, u := range ups {
		k := chunkKey(u.h)
		var err error
		if u.val == nil {
			if err = wb.Delete(k); err == nil {
				err = wb.Delete(outboardKey(u.h))
			}
		} else if err = wb.Set(k, u.val); err == nil && u.ob != nil {
			err = wb.Set(outboardKey(u.h), u.ob)
		}
		if err != nil {
			s.redirty(ups)
			return fmt.Errorf("flush chunk index: %w", err)
		}
	}
	if err := wb.Flush(); err != nil {
		s.redirty(ups)
		return fmt.Errorf("flush chunk index: %w", err)
	}
	s.mu.Lock()
	for _, u := range ups {
		if u.ob != nil && len(s.obPending[u.h]) > 0 && &s.obPending[u.h][0] == &u.ob[0] {
			delete(s.obPending, u.h) // in the index now
		}
	}
	s.mu.Unlock()
	return nil
}

// chunkUpdate is one chunk index write of a flush.
type chunkUpdate struct {
	h   blob.Hash
	val []byte // nil = delete (the outboard too)
	ob  []byte // the chunk's outboard to write, if any
}

// redirty marks the entries of a failed flush dirty again.
func (s *Store) redirty(ups []chunkUpdate) {
	s.mu.Lock()
	for _, u := range ups {
		s.dirty[u.h] = struct{}{}
	}
	s.mu.Unlock()
}

func chunkKey(h blob.Hash) []byte { return append([]byte(keyChunk), h[:]...) }

func outboardKey(h blob.Hash) []byte { return append([]byte(keyOutboard), h[:]...) }

// chunkPath returns DIR/chunks/ab/<hex>. One level of 256 shards, created
// at Open: a second level (65536 directories) made nearly every new chunk
// create two directories, and mkdir cost as much as writing the chunk on
// ext4. 256 shards keep directories under ~4000 entries per TB of 1 MiB
// chunks.
func (s *Store) chunkPath(h blob.Hash) string {
	x := h.String()
	return filepath.Join(s.chunkDir, x[:2], x)
}

// makeShards creates the 256 shard directories of chunkPath.
func (s *Store) makeShards() error {
	for i := 0; i < 256; i++ {
		d := filepath.Join(s.chunkDir, fmt.Sprintf("%02x", i))
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("open store: create %s: %w", d, err)
		}
	}
	return nil
}

// clearDir removes everything inside dir.
func clearDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// isNoSpace reports whether err means the disk (or a quota) is full.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) ||
		(err != nil && strings.Contains(err.Error(), "no space left on device"))
}

// noSpace wraps err with blob.ErrNoSpace when it means the disk is full.
func noSpace(err error) error {
	if err != nil && isNoSpace(err) && !errors.Is(err, blob.ErrNoSpace) {
		return fmt.Errorf("%w: %w", blob.ErrNoSpace, err)
	}
	return err
}

// distinct returns the distinct hashes of hs, in first-seen order.
func distinct(hs []blob.Hash) []blob.Hash {
	seen := make(map[blob.Hash]struct{}, len(hs))
	out := make([]blob.Hash, 0, len(hs))
	for _, h := range hs {
		if _, ok := seen[h]; !ok {
			seen[h] = struct{}{}
			out = append(out, h)
		}
	}
	return out
}

// badgerLogger routes Badger's errors and warnings to the store's logger at
// warning level and drops its info and debug chatter.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any) {
	b.l.Warn("badger: " + strings.TrimSpace(fmt.Sprintf(f, a...)))
}
func (b badgerLogger) Warningf(f string, a ...any) {
	b.l.Warn("badger: " + strings.TrimSpace(fmt.Sprintf(f, a...)))
}
func (badgerLogger) Infof(string, ...any)  {}
func (badgerLogger) Debugf(string, ...any) {}
