package rank

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// connectedTo reports whether process pid holds an established TCP
// connection to port (the rendezvous store, which a worker reaches in
// init_process_group).
func connectedTo(pid, port int) bool {
	inodes := map[string]bool{}
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "net", f))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 10 || fs[3] != "01" { // 01: ESTABLISHED
				continue
			}
			_, hexPort, ok := strings.Cut(fs[2], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); ok && err == nil && int(p) == port {
				inodes[fs[9]] = true
			}
		}
	}
	if len(inodes) == 0 {
		return false
	}
	fds := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	ents, err := os.ReadDir(fds)
	if err != nil {
		return false
	}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(fds, e.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") && inodes[strings.TrimSuffix(l[len("socket:["):], "]")] {
			return true
		}
	}
	return false
}
