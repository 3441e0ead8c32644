package job

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gorun/gorun/cmdline"
	"github.com/gorun/gorun/internal/lazyre"
)

// ParseLaunch is cmdline.Parse for a launch, with options of a torchrun
// newer than gorun: where the command line has options neither gorun nor
// torchrun 2.11 knows, it reads the --help of the torchrun the launch
// would run (--torchrun, looked up on this machine's PATH: the node's in
// local mode and per pod, the head's image otherwise), once per torchrun
// (cached by its path, size and time), and passes the options that
// torchrun lists to it as typed, each named in a note. An option it does
// not list is refused, as before. notes is what to say once.
func ParseLaunch(ctx context.Context, args []string, getenv func(string) string, lookPath func(string) (string, error)) (cl cmdline.CommandLine, notes []string, err error) {
	cl, err = cmdline.Parse(args, getenv)
	var unknown *cmdline.UnknownOptionsError
	if !errors.As(err, &unknown) {
		return cl, nil, err
	}
	listed, _ := torchrunOptions(ctx, unknown.Torchrun, lookPath)
	var extra []cmdline.Extra
	for _, name := range unknown.Names {
		o, ok := listed[name]
		if !ok {
			return cl, nil, err // torchrun does not know it either (or could not be asked)
		}
		if !slices.ContainsFunc(extra, func(e cmdline.Extra) bool { return e.Names[0] == o.Names[0] }) {
			extra = append(extra, o)
			notes = append(notes, fmt.Sprintf("%s is not an option gorun knows; the torchrun it runs (%s) lists it in its --help, so it is passed to torchrun as given", name, unknown.Torchrun))
		}
	}
	cl, err = cmdline.ParseExtra(args, getenv, extra)
	return cl, notes, err
}

// torchrunHelpTimeout bounds `torchrun --help`, which imports torch.
const torchrunHelpTimeout = 60 * time.Second

// torchrunOptions is every long option torchrun's --help lists, by each of
// its spellings. The help text is kept under the user's cache, named by
// the torchrun's path, size and modification time: a new torch rewrites
// its torchrun, and is asked again.
func torchrunOptions(ctx context.Context, torchrun string, lookPath func(string) (string, error)) (map[string]cmdline.Extra, error) {
	argv := strings.Fields(torchrun)
	if len(argv) == 0 {
		return nil, errors.New("no torchrun")
	}
	path, err := lookPath(argv[0])
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%d\x00%d", path, strings.Join(argv[1:], "\x00"), fi.Size(), fi.ModTime().UnixNano()))
	cache := "" // under the user's cache, as the hang limits and stacks are (os.UserCacheDir)
	if dir, err := os.UserCacheDir(); err == nil {
		cache = filepath.Join(dir, "gorun", "torchrun-help", hex.EncodeToString(sum[:12])+".txt")
	}
	help, err := os.ReadFile(cache)
	if err != nil || cache == "" {
		ctx, cancel := context.WithTimeout(ctx, torchrunHelpTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, path, append(argv[1:], "--help")...)
		if help, err = cmd.Output(); err != nil {
			return nil, fmt.Errorf("%s --help: %w", torchrun, err)
		}
		if cache != "" && os.MkdirAll(filepath.Dir(cache), 0o700) == nil {
			_ = writeFileAtomic(cache, help) // a cache: the next run asks again when it cannot be kept
		}
	}
	return helpOptions(string(help)), nil
}

// helpOption matches one option's line of argparse's help:
// "  --exit-barrier-timeout EXIT_BARRIER_TIMEOUT, --exit_barrier_timeout EXIT_BARRIER_TIMEOUT".
var helpOption = lazyre.New(`^\s{1,8}(--?[A-Za-z][-\w]*(?: [A-Z][A-Z0-9_]*| \{[^}]*\})?(?:, --?[A-Za-z][-\w]*(?: [A-Z][A-Z0-9_]*| \{[^}]*\})?)*)(?:\s{2,}|$)`)

// helpOptions reads the options of an argparse --help text: each long
// spelling, and whether it takes a value.
func helpOptions(help string) map[string]cmdline.Extra {
	out := map[string]cmdline.Extra{}
	for _, line := range strings.Split(help, "\n") {
		m := helpOption().FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var e cmdline.Extra
		for _, part := range strings.Split(m[1], ", ") {
			name, metavar, _ := strings.Cut(part, " ")
			if strings.HasPrefix(name, "--") {
				e.Names = append(e.Names, name)
			}
			e.Value = e.Value || metavar != ""
		}
		for _, n := range e.Names {
			out[n] = e
		}
	}
	return out
}
