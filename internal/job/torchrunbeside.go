package job

import (
	"os"
	"path/filepath"

	"github.com/gorun/gorun/cmdline"
)

// TorchrunBesideSelf makes a launch on this machine run the torchrun
// installed beside gorun itself (the environment's bin/ that pip put
// gorun in, with torch and its torchrun), ahead of any other torchrun on
// PATH, where --torchrun names none but the word torchrun: gorun called
// by its path from an environment that is not activated runs that
// environment's torch. A launch that reaches other nodes is left as it
// is (their torchrun is theirs). The note says so when it changes what
// PATH would have given; "" otherwise.
func TorchrunBesideSelf(cl cmdline.CommandLine, self string, getenv func(string) string, lookPath func(string) (string, error)) (cmdline.CommandLine, string) {
	if cl.Gorun.Torchrun != "torchrun" || cl.Gorun.Hosts != "" || cl.Gorun.Hostfile != "" ||
		getenv("SLURM_JOB_ID") != "" && getenv("SLURM_STEP_ID") == "" || self == "" {
		return cl, ""
	}
	beside := filepath.Join(filepath.Dir(self), "torchrun")
	fi, err := os.Stat(beside)
	if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return cl, ""
	}
	cl.Gorun.Torchrun = beside
	onPath, err := lookPath("torchrun")
	if err == nil {
		if same, _ := os.Stat(onPath); same != nil && os.SameFile(same, fi) {
			return cl, ""
		}
		return cl, "torchrun: " + beside + ", beside this gorun (its environment's), not " + onPath + " from PATH (--torchrun PATH picks another)"
	}
	return cl, ""
}
