package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/hosts"
	"github.com/gorun/gorun/internal/userr"
)

func TestUseSrun(t *testing.T) {
	withSrun := t.TempDir()
	if err := os.WriteFile(filepath.Join(withSrun, "srun"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	nodes := []hosts.Host{{Name: "node0"}, {Name: "node1"}}
	for _, tc := range []struct {
		name     string
		launcher string
		hostsOpt string
		jobID    string
		path     string
		hosts    []hosts.Host
		want     bool
		wantErr  bool
	}{
		{"auto in an allocation", "auto", "", "7", withSrun, nodes, true, false},
		{"auto with --hosts", "auto", "node0,node1", "7", withSrun, nodes, false, false},
		{"auto outside an allocation", "auto", "", "", withSrun, nodes, false, false},
		{"auto without srun", "auto", "", "7", t.TempDir(), nodes, false, false},
		{"auto, local mode", "auto", "", "7", withSrun, nil, false, false},
		{"ssh in an allocation", "ssh", "", "7", withSrun, nodes, false, false},
		{"srun with --hosts", "srun", "node0,node1", "7", withSrun, nodes, true, false},
		{"srun outside an allocation", "srun", "", "", withSrun, nodes, false, true},
		{"srun not on the PATH", "srun", "", "7", t.TempDir(), nodes, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SLURM_JOB_ID", tc.jobID)
			t.Setenv("PATH", tc.path)
			got, err := useSrun(cmdline.Options{Launcher: tc.launcher, Hosts: tc.hostsOpt}, tc.hosts)
			var input *userr.InputError
			if tc.wantErr != (err != nil) || (err != nil && !errors.As(err, &input)) {
				t.Fatalf("useSrun: %v, want an input error: %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("useSrun = %v, want %v", got, tc.want)
			}
		})
	}
}
