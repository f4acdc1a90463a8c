package main

import (
	"time"

	"github.com/omst-project/omst/pkg/rpcbridge"
)

// infoJSON is a blob's description as `omst ls --json` and `omst stat
// --json` print it: rpcbridge.Info with its put time in RFC 3339 (UTC, with
// nanoseconds) instead of Unix nanoseconds. The local API (and so the C
// and Python clients) keeps its numeric field; nothing reads the CLI's.
type infoJSON struct {
	Name      string `json:"name"`
	ID        string `json:"id"`
	Size      uint64 `json:"size"`
	ChunkSize uint32 `json:"chunk_size"` // 0 if the manifest could not be had here
	Chunks    uint32 `json:"chunks"`
	Time      string `json:"time,omitempty"` // put time; absent when unknown (a blob got by its ID)
	Origin    string `json:"origin"`
	Local     bool   `json:"local"`
	Pinned    bool   `json:"pinned"`
}

func toInfoJSON(in rpcbridge.Info) infoJSON {
	return infoJSON{Name: in.Name, ID: in.ID, Size: in.Size, ChunkSize: in.ChunkSize, Chunks: in.Chunks,
		Time: putTime(in.Time), Origin: in.Origin, Local: in.Local, Pinned: in.Pinned}
}

func toInfosJSON(ins []rpcbridge.Info) []infoJSON {
	out := make([]infoJSON, 0, len(ins))
	for _, in := range ins {
		out = append(out, toInfoJSON(in))
	}
	return out
}

// putTime formats a put time (Unix nanoseconds) in RFC 3339, UTC; "" for
// none.
func putTime(ns int64) string {
	if ns == 0 {
		return ""
	}
	return time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
}
