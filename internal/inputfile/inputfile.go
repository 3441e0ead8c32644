package inputfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// DefaultMax is the limit for config-like files (hostfiles, ssh_config,
// known_hosts, identity files, topology captures): far above any real one,
// far below what would hurt if a path pointed at the wrong file.
const DefaultMax = 1 << 20

// Errors Read wraps, for errors.Is. A missing file wraps fs.ErrNotExist
// (and the other os errors pass through the same way).
var (
	// ErrNotRegular: the path names a FIFO, device, socket or directory.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge: the file holds more than the caller's limit.
	ErrTooLarge = errors.New("too large")
)

// Read returns the contents of the regular file at path (symbolic links
// followed), refusing anything else and any file over max bytes.
//
// It cannot block on a FIFO without a writer or a device: the file is opened
// with O_NONBLOCK (which makes such an open return at once, and means
// nothing for regular files), then the opened descriptor is checked, so a
// name swapped between a check and the open cannot slip a FIFO through.
// At most max+1 bytes are read, so a file that grows while it is read is
// refused too rather than read without bound.
func Read(path string, max int64) ([]byte, error) {
	b, _, err := ReadInfo(path, max)
	return b, err
}

// ReadInfo is Read that also returns the FileInfo of the descriptor it
// read, for checks that must be about the file read rather than whatever
// the name points at a moment later (the permissions of a private key).
func ReadInfo(path string, max int64) ([]byte, fs.FileInfo, error) {
	if path == "" {
		return nil, nil, errors.New("read: empty file name")
	}
	if max < 0 {
		max = 0
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		// Opening a unix socket fails with ENXIO: say what the name is.
		if errors.Is(err, syscall.ENXIO) {
			if st, serr := os.Stat(path); serr == nil && !st.Mode().IsRegular() {
				return nil, nil, notRegular(path, st.Mode())
			}
		}
		return nil, nil, err // *fs.PathError: "open PATH: ..."
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, nil, notRegular(path, st.Mode())
	}
	if st.Size() > max {
		return nil, nil, fmt.Errorf("read %s: %w: it is %s; the limit is %s", path, ErrTooLarge, size(st.Size()), size(max))
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > max {
		return nil, nil, fmt.Errorf("read %s: %w: it grew past the limit of %s while being read", path, ErrTooLarge, size(max))
	}
	return b, st, nil
}

// notRegular names what path is instead of a regular file.
func notRegular(path string, m fs.FileMode) error {
	return fmt.Errorf("read %s: is %s, %w", path, kind(m), ErrNotRegular)
}

func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	default:
		return "an irregular file (" + m.Type().String() + ")"
	}
}

// size formats n bytes for a message: "512 bytes", "3.2 MiB", "1 MiB".
func size(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " bytes"
	}
	v, suffix := float64(n)/unit, "KiB"
	for _, s := range []string{"MiB", "GiB", "TiB"} {
		if v < unit {
			break
		}
		v, suffix = v/unit, s
	}
	return strings.TrimSuffix(strconv.FormatFloat(v, 'f', 1, 64), ".0") + " " + suffix
}
