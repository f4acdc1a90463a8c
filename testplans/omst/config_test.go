package main

import (
	"bytes"
	"io"
	"testing"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"32MiB", 32 << 20},
		{"1M", 1000000},
		{"100Mbit", 12500000},
		{"1Gbps", 125000000},
		{"4096", 4096},
	} {
		got, err := parseSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	if _, err := parseSize("lots"); err == nil {
		t.Error("parseSize(lots): no error")
	}
}

func TestPayloadDeterministic(t *testing.T) {
	a, _ := io.ReadAll(payload(7, 3, 100000))
	b, _ := io.ReadAll(payload(7, 3, 100000))
	c, _ := io.ReadAll(payload(7, 4, 100000))
	if len(a) != 100000 || !bytes.Equal(a, b) {
		t.Fatal("same seed and stream gave different bytes")
	}
	if bytes.Equal(a, c) {
		t.Fatal("different streams gave the same bytes")
	}
}

func TestSameNode(t *testing.T) {
	const id = "12D3KooWKr6h9p2d48H7byrJHGGxz4ySwv1E3qaDVJpYEdJ9zEnF"
	for _, parent := range []string{id, "/ip4/127.0.0.1/tcp/1/p2p/" + id} {
		if !sameNode(parent, id) {
			t.Errorf("sameNode(%q) = false", parent)
		}
	}
	if sameNode("/ip4/127.0.0.1/tcp/1/p2p/12D3KooWother", id) {
		t.Error("different peers compare equal")
	}
}
