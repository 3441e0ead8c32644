package sshexec

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakeSlurm puts an srun and an sbcast on PATH that stand for a
// three-node allocation: `srun ... sha256sum PATH` prints bin's hash once
// per node when the test made PATH "present" (a file in dir/present/ named
// like PATH's base name), else fails like sha256sum on a missing file;
// sbcast records its arguments in dir/sbcast.log and exits with sbcastCode.
func fakeSlurm(t *testing.T, bin Binary, present []string, sbcastCode int) (sbcastLog string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "present"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range present {
		if err := os.WriteFile(filepath.Join(dir, "present", filepath.Base(p)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hash := strings.TrimPrefix(bin.Name, "gorun-") + strings.Repeat("0", 48)
	srun := `#!/bin/sh
for a; do path=$a; done
if [ -e "` + dir + `/present/$(basename "$path")" ]; then
  for n in 1 2 3; do echo "` + hash + `  $path"; done
  exit 0
fi
echo "sha256sum: $path: No such file or directory" >&2
exit 1
`
	sbcast := "#!/bin/sh\necho \"$@\" >>" + dir + "/sbcast.log\n"
	if sbcastCode != 0 {
		sbcast += "echo 'sbcast: error: REQUEST_FILE_BCAST(node0): Text file busy' >&2\nexit " + strconv.Itoa(sbcastCode) + "\n"
	}
	for name, text := range map[string]string{"srun": srun, "sbcast": sbcast} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return filepath.Join(dir, "sbcast.log")
}

func TestPlaceSrunAgent(t *testing.T) {
	bin := Binary{Path: "/shared/bin/gorun", Name: "gorun-0123456789abcdef"}
	dst := "/tmp/" + bin.Name
	nodes := []string{"node0", "node1", "node2"}
	cases := []struct {
		name       string
		present    []string
		sbcastCode int
		want       string
		wantSbcast bool
		wantErr    string
	}{
		{name: "shared filesystem", present: []string{bin.Path}, want: bin.Path},
		{name: "copy already on every node", present: []string{dst}, want: dst},
		{name: "copied by sbcast", want: dst, wantSbcast: true},
		{name: "sbcast fails", sbcastCode: 26, wantSbcast: true, wantErr: "Text file busy"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			log := fakeSlurm(t, bin, tc.present, tc.sbcastCode)
			got, err := PlaceSrunAgent(context.Background(), nodes, bin)
			_, statErr := os.Stat(log)
			if called := statErr == nil; called != tc.wantSbcast {
				t.Errorf("sbcast called: %v, want %v", called, tc.wantSbcast)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tc.wantErr)
				}
				// main maps an *exec.ExitError (an ExitCoder) to the
				// worker's exit code, silently: sbcast's is not one.
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					t.Fatalf("err wraps sbcast's *exec.ExitError: %v", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
