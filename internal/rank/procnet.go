package rank

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// joinWatch tells when process pid has joined the rendezvous store: it
// holds an established TCP connection to port (the store, which a worker
// reaches in init_process_group).
//
// Reading /proc/PID/net/tcp walks the kernel's whole connection hash,
// whatever the process holds: read 20 times a second per rank, it cost
// 50-70 ms of CPU per rank during the workers' own import of torch on a
// 2-CPU machine, and slowed that import (docs/BENCHMARKS.md, "The store
// watch off the workers' CPUs"). So the table is read only when the worker's
// sockets changed at this look or at one of the two before (a connect
// completes a moment after its socket is made), and once in tableEvery
// looks otherwise; the worker's open files are cheap to list.
type joinWatch struct {
	pid, port int
	sockets   map[string]bool // socket inodes seen among the worker's files
	recent    int             // looks left that read the table since a new socket
	looks     int

	// established reads the inodes of pid's namespace's TCP connections
	// to port (readEstablished; in tests, a counter).
	established func(pid, port int) map[string]bool
}

// tableEvery: with no new socket, the table is still read this often
// (looks), in case a socket was reused or missed between two looks.
const tableEvery = 20

func newJoinWatch(pid, port int) *joinWatch {
	return &joinWatch{pid: pid, port: port, sockets: map[string]bool{}, established: readEstablished}
}

// joined reports whether the worker now holds a connection to the store.
func (j *joinWatch) joined() bool {
	mine := socketInodes(j.pid)
	for ino := range mine {
		if !j.sockets[ino] {
			j.sockets[ino], j.recent = true, 3
		}
	}
	j.looks++
	if j.recent == 0 && j.looks%tableEvery != 0 {
		return false
	}
	j.recent = max(0, j.recent-1)
	if len(mine) == 0 {
		return false
	}
	for ino := range j.established(j.pid, j.port) {
		if mine[ino] {
			return true
		}
	}
	return false
}

// socketInodes are the inodes of the sockets among process pid's open
// files.
func socketInodes(pid int) map[string]bool {
	fds := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	ents, err := os.ReadDir(fds)
	if err != nil {
		return nil
	}
	inodes := map[string]bool{}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(fds, e.Name()))
		if ino, ok := strings.CutPrefix(l, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	return inodes
}

// readEstablished are the inodes of the established TCP connections to
// port in process pid's network namespace.
func readEstablished(pid, port int) map[string]bool {
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
	return inodes
}
