package main

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func tarOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	for name, body := range files {
		if err := w.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(body))
	}
	w.Close()
	return b.Bytes()
}

func TestUntar(t *testing.T) {
	dst := t.TempDir()
	n, err := untar(tarOf(t, map[string]string{"./nccl_trace_rank_0": "a", "nccl_trace_rank_1": "bb"}), dst)
	if err != nil || n != 2 {
		t.Fatalf("untar = %d, %v", n, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "nccl_trace_rank_1")); string(b) != "bb" {
		t.Errorf("content %q", b)
	}
	for _, bad := range []string{"../escape", "/etc/escape", "a/../../escape"} {
		if _, err := untar(tarOf(t, map[string]string{bad: "x"}), t.TempDir()); err == nil {
			t.Errorf("%q was written", bad)
		}
	}
}
