package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/bytesize"
	"github.com/omst-project/omst/pkg/localfile"
	"github.com/omst-project/omst/pkg/namespace"
	"github.com/omst-project/omst/pkg/rpcbridge"
)

// omst get -r PREFIX -o DIR and omst put -r DIR PREFIX: many names in one
// request (GET_MANY, PUT_MANY; docs/rpcbridge.md §6.14).

// manyReport is what get -r and put -r print: the summary line, or with
// --json this object.
type manyReport struct {
	Op       string        `json:"op"` // "get" or "put"
	Prefix   string        `json:"prefix"`
	Dir      string        `json:"dir"`
	Entries  int           `json:"entries"`
	OK       int           `json:"ok"`
	Failed   int           `json:"failed"`
	Bytes    uint64        `json:"bytes"`
	Seconds  float64       `json:"seconds"`
	Failures []manyFailure `json:"failures"`
}

// manyFailure is one entry that failed.
type manyFailure struct {
	Name  string `json:"name"`
	Code  string `json:"code"` // the daemon's error code, or "LOCAL" (a file here)
	Error string `json:"error"`
}

func failureOf(name string, err error) manyFailure {
	code := "LOCAL"
	var e *rpcbridge.Error
	if errors.As(err, &e) {
		code = e.Code.String()
	}
	return manyFailure{Name: name, Code: code, Error: err.Error()}
}

// finishMany prints the report and returns the command's error: nil when
// every entry succeeded, else one whose exit status is 1, or 3 when every
// failure is a missing name.
func finishMany(g *globals, out, errw io.Writer, r manyReport, asJSON bool) error {
	if r.Failures == nil {
		r.Failures = []manyFailure{}
	}
	if asJSON {
		if err := printJSON(out, r); err != nil {
			return err
		}
	} else {
		for _, f := range r.Failures {
			fmt.Fprintf(errw, "omst: %s %s: %s\n", r.Op, f.Name, f.Error)
		}
		verb, where := "got", fmt.Sprintf("under %s into %s", r.Prefix, r.Dir)
		if r.Op == "put" {
			verb, where = "put", fmt.Sprintf("from %s under %s", r.Dir, r.Prefix)
		}
		fmt.Fprintf(out, "%s %d of %d names %s (%s) in %.2f s; %d failed\n", verb, r.OK, r.Entries, where,
			bytesize.Format(int64(r.Bytes)), r.Seconds, r.Failed)
	}
	if r.Failed == 0 {
		return nil
	}
	code := exitError
	missing := true
	for _, f := range r.Failures {
		missing = missing && f.Code == rpcbridge.CodeNotFound.String()
	}
	if missing {
		code = exitCode(blob.ErrNotFound)
	}
	return exitStatus{code: code, err: fmt.Errorf("%s -r %s: %d of %d names failed", r.Op, r.Prefix, r.Failed, r.Entries)}
}

// getRecursive fetches every name under prefix into dir/<name relative to
// prefix>: directories made as needed, each file written atomically
// (localfile.Create: a temporary file renamed into place), an existing
// file kept (its entry fails) unless force, nothing in dir ever deleted.
func getRecursive(ctx context.Context, g *globals, cl *rpcbridge.Client, prefix, dir string, force bool) (manyReport, error) {
	scope, err := namespace.PrefixScope(prefix)
	if err != nil {
		return manyReport{}, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return manyReport{}, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return manyReport{}, err
	}
	r := manyReport{Op: "get", Prefix: scope, Dir: dir}
	start := time.Now()
	sum, err := cl.GetMany(ctx, rpcbridge.ManyRequest{Prefix: scope, ByPrefix: true}, func(e rpcbridge.ManyEntry, data io.Reader) error {
		r.Entries++
		if e.Err == nil {
			e.Err = writeEntry(ctx, abs, scope, e.Name, data, force)
		}
		if e.Err != nil {
			r.Failed++
			r.Failures = append(r.Failures, failureOf(e.Name, e.Err))
			return nil
		}
		r.OK++
		r.Bytes += e.Info.Size
		return nil
	})
	r.Seconds = time.Since(start).Seconds()
	if err != nil {
		return r, err
	}
	if sum.Entries != r.Entries {
		return r, fmt.Errorf("get -r %s: the daemon counted %d entries, %d arrived", scope, sum.Entries, r.Entries)
	}
	return r, nil
}

// writeEntry writes one entry's bytes to dir/<name less scope>.
func writeEntry(ctx context.Context, dir, scope, name string, data io.Reader, force bool) error {
	rel, ok := strings.CutPrefix(name, scope)
	if !ok || rel == "" {
		return fmt.Errorf("name %q is not under %s", name, scope)
	}
	// Names are checked (no empty, . or .. segment): rel stays in dir.
	path := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if !force {
		if _, err := os.Lstat(path); err == nil {
			return fmt.Errorf("%s exists, not replaced (--force replaces it)", path)
		}
	}
	d, err := localfile.Create(ctx, path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(d.File, data); err != nil {
		d.Abort()
		return err
	}
	if force {
		err = d.Commit()
	} else {
		err = d.CommitNew()
	}
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s exists, not replaced (--force replaces it)", path)
	}
	return err
}

// putRecursive publishes every regular file under dir as prefix/<path
// relative to dir>, in one PUT_MANY. Links to files are followed as
// localfile.OpenRead follows them; directories found through links are
// not entered.
func putRecursive(ctx context.Context, cl *rpcbridge.Client, dir, prefix string, opts rpcbridge.PutOptions) (manyReport, error) {
	scope, err := namespace.PrefixScope(prefix)
	if err != nil {
		return manyReport{}, err
	}
	r := manyReport{Op: "put", Prefix: scope, Dir: dir}
	var items []rpcbridge.PutItem
	var local []manyFailure
	err = filepath.WalkDir(dir, func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			if path == dir {
				return err
			}
			local = append(local, manyFailure{Name: path, Code: "LOCAL", Error: err.Error()})
			return nil
		}
		if de.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		name := scope + filepath.ToSlash(rel)
		st, err := os.Stat(path)
		switch {
		case err != nil:
			local = append(local, manyFailure{Name: name, Code: "LOCAL", Error: err.Error()})
			return nil
		case !st.Mode().IsRegular():
			local = append(local, manyFailure{Name: name, Code: "LOCAL", Error: fmt.Sprintf("%s is not a regular file", path)})
			return nil
		}
		if err := blob.ValidateName(name); err != nil {
			local = append(local, failureOf(name, fmt.Errorf("%s: %w", path, err)))
			return nil
		}
		items = append(items, rpcbridge.PutItem{Name: name, Size: uint64(st.Size()), Open: func() (io.ReadCloser, error) {
			return localfile.OpenRead(ctx, path)
		}})
		return nil
	})
	if err != nil {
		return r, err
	}
	start := time.Now()
	entries, _, err := cl.PutMany(ctx, items, opts)
	r.Seconds = time.Since(start).Seconds()
	if err != nil {
		return r, err
	}
	for _, e := range entries {
		r.Entries++
		if e.Err != nil {
			r.Failed++
			r.Failures = append(r.Failures, failureOf(e.Name, e.Err))
			continue
		}
		r.OK++
		r.Bytes += e.Info.Size
	}
	r.Entries += len(local)
	r.Failed += len(local)
	r.Failures = append(r.Failures, local...)
	return r, nil
}
