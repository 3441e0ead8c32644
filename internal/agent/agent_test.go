package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/internal/wire"
)

func TestMergeEnv(t *testing.T) {
	base := []string{"A=1", "B=2", "PATH=/bin"}
	tests := []struct {
		name    string
		over    map[string]string
		want    []string
		wantErr string
	}{
		{name: "none", want: base},
		{name: "override and add, sorted", over: map[string]string{"Z": "z", "B": "x=y", "C": ""},
			want: []string{"A=1", "PATH=/bin", "B=x=y", "C=", "Z=z"}},
		{name: "bad name", over: map[string]string{"A=B": "1"}, wantErr: "invalid"},
		{name: "empty name", over: map[string]string{"": "1"}, wantErr: "invalid"},
		{name: "nul value names the variable only", over: map[string]string{"TOKEN": "sec\x00ret"}, wantErr: "TOKEN contains a NUL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := mergeEnv(base, tc.over)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "sec") {
					t.Fatalf("err = %v, want one containing %q and no value", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("env = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "prog")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "noexec"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, file, path, dir, want string
		wantErr                     bool
	}{
		{name: "found", file: "prog", path: "/nonexistent:" + dir, want: exe},
		{name: "slash used as is", file: "./x/prog", path: dir, want: "./x/prog"},
		{name: "relative entry against dir", file: "prog", path: ".", dir: dir, want: "prog"},
		{name: "not executable", file: "noexec", path: dir, wantErr: true},
		{name: "directory skipped", file: filepath.Base(dir), path: filepath.Dir(dir), wantErr: true},
		{name: "missing", file: "prog", path: "/nonexistent", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := lookPath(tc.file, tc.path, tc.dir)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("path = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestWithoutStepVars(t *testing.T) {
	step := []string{"PATH=/bin", "SLURM_JOB_ID=7", "SLURM_JOB_NODELIST=node[0-2]", "SLURM_PROCID=0",
		"SLURM_NTASKS=1", "SLURM_STEP_ID=3", "SLURM_STEP_NODELIST=node1", "SLURM_NODEID=1", wire.AgentStepVar + "=1"}
	got := strings.Join(withoutStepVars(step), " ")
	if want := "PATH=/bin SLURM_JOB_ID=7 SLURM_JOB_NODELIST=node[0-2] SLURM_STEP_ID=3 SLURM_STEP_NODELIST=node1"; got != want {
		t.Errorf("agent step: %q, want %q", got, want)
	}
	// Not gorun's own step (an agent over SSH, or `srun gorun`'s local
	// agent): kept as torchrun would see it.
	other := step[:len(step)-1]
	if got := withoutStepVars(other); !slices.Equal(got, other) {
		t.Errorf("other agent: %q, want it unchanged", got)
	}
}
