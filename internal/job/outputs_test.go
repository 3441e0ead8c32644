package job

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/internal/userr"
)

func TestCheckOutputs(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "train.py")
	hostfile := filepath.Join(dir, "hostfile")
	file := filepath.Join(dir, "a-file")
	for _, p := range []string{script, hostfile, file} {
		os.WriteFile(p, []byte("x"), 0o644)
	}
	ro := filepath.Join(dir, "ro")
	os.Mkdir(ro, 0o555)
	self := filepath.Join(dir, "gorun")
	os.WriteFile(self, []byte("binary"), 0o755)
	for _, tc := range []struct {
		name string
		args []string
		want string // in the error; "" for none
	}{
		{"no outputs", nil, ""},
		{"new files in a folder that exists", []string{"--report", filepath.Join(dir, "r.html"), "--telemetry", filepath.Join(dir, "t.jsonl")}, ""},
		{"an existing file is overwritten", []string{"--report", file}, ""},
		{"a new flight-recorder folder", []string{"--flight-recorder", filepath.Join(dir, "fr", "deeper")}, ""},
		{"an existing flight-recorder folder", []string{"--flight-recorder", dir}, ""},
		{"report into a missing folder", []string{"--report", filepath.Join(dir, "missing", "r.html")}, "does not exist"},
		{"report is a directory", []string{"--report", dir}, "is a directory"},
		{"report is a device", []string{"--report", "/dev/full"}, "is not a regular file"},
		{"telemetry in a file's place", []string{"--telemetry", filepath.Join(file, "t.jsonl")}, "is not a folder"},
		{"report is the training script", []string{"--report", script}, "is also training script"},
		{"telemetry is the training script, named another way", []string{"--telemetry", filepath.Join(dir, ".", "train.py")}, "is also training script"},
		{"report is the hostfile", []string{"--hostfile", hostfile, "--report", hostfile}, "is also --hostfile"},
		{"report is the gorun binary", []string{"--report", self}, "is also the gorun binary"},
		{"report and telemetry are one file", []string{"--report", filepath.Join(dir, "same"), "--telemetry", filepath.Join(dir, "same")}, "is also --report"},
		{"flight recorder is a file", []string{"--flight-recorder", file}, "is a file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := cmdline.Parse(append(tc.args, script), func(string) string { return "" })
			if err != nil {
				t.Fatal(err)
			}
			_, err = checkOutputs(cl, self)
			var input *userr.InputError
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (!errors.As(err, &input) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("err = %v, want an input error saying %q", err, tc.want)
			}
		})
	}
	// Nothing was made.
	if _, err := os.Stat(filepath.Join(dir, "fr")); err == nil {
		t.Error("checkOutputs made the flight-recorder folder")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".gorun-probe") {
			t.Errorf("probe left behind: %s", e.Name())
		}
	}
}

func TestOutputsCreate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fr", "deeper")
	if err := (outputs{flightRecorder: dir}).create(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Errorf("not made: %v", err)
	}
	if err := (outputs{}).create(); err != nil {
		t.Error(err)
	}
}
