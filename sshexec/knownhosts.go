package sshexec

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// knownHosts is the known_hosts files of one fan-out, each read, checked
// and indexed once, on first use, and shared by every dial (safe for
// concurrent use). A cluster's known_hosts holds a line per node, so
// reading and parsing it per dial costs the square of the node count.
//
// Verification itself stays with x/crypto's knownhosts: for each lookup
// it gets the lines of each file that may name the host (the index only
// leaves out lines that cannot), with their file names and line numbers
// put back in its errors.
//
// What a file says is read once: a change made to it by another program
// during the fan-out is not seen by that fan-out, with one exception that
// keeps accept-new strict: before recording a key, record re-reads a file
// that changed under its lock, and a key recorded there meanwhile (by
// another gorun, or ssh) counts; the same key is not written twice, a
// different one is refused as changed. Keys this fan-out records are seen
// by its later lookups (a jump host reached by every dial is recorded
// once).
type knownHosts struct {
	mu    sync.RWMutex
	files map[string]*knownFile
	rec   sync.Mutex // held by record, from its re-check to its write
}

func newKnownHosts() *knownHosts { return &knownHosts{files: map[string]*knownFile{}} }

// knownFile is one known_hosts file as read.
type knownFile struct {
	path  string
	err   error // reading or checking it failed: every lookup through it fails so
	empty bool  // missing or empty: nothing known there
	size  int64 // bytes known (read, plus appended by record)
	count int   // lines, as bufio.ScanLines counts them
	open  bool  // the content so far ends without a newline

	lines   []knownLine
	literal map[string][]int // lines by "host port" of each plain pattern
	others  []int            // markers, wildcards, negations, unparsed: in every lookup
	hashed  []hashedLine
}

// knownLine is a line with an entry (not blank, not a comment).
type knownLine struct {
	num  int // 1-based, in the file
	text []byte
}

// hashedLine is a line whose host is hashed (|1|salt|hash): it names a
// host when HMAC-SHA1(salt, host) is hash, so each lookup computes one
// HMAC per hashed line (as OpenSSH does for each connection).
type hashedLine struct {
	at         int // index in lines
	salt, hash []byte
}

// file returns path, read and indexed (once).
func (k *knownHosts) file(path string) *knownFile {
	k.mu.RLock()
	f := k.files[path]
	k.mu.RUnlock()
	if f != nil {
		return f
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if f := k.files[path]; f != nil {
		return f
	}
	f = loadKnownFile(path)
	k.files[path] = f
	return f
}

// loadKnownFile reads path through inputfile (bounded; a FIFO or device
// refused, not waited on), has knownhosts check all of it once (so a file
// it refuses fails every lookup, as before), and indexes its lines.
func loadKnownFile(path string) *knownFile {
	f := &knownFile{path: path}
	b, err := readFile(path, maxKnownHosts)
	switch {
	case errors.Is(err, fs.ErrNotExist) || (err == nil && len(b) == 0):
		f.empty = true
		return f
	case err != nil:
		f.err = fmt.Errorf("known_hosts: %w", err)
		return f
	}
	if _, err := parseKnownHosts(path, b, nil); err != nil {
		f.err = err
		return f
	}
	f.literal = map[string][]int{}
	f.add(b)
	return f
}

// refresh reads path again when its size is no longer what k knows of it
// (record calls it under the file's lock).
func (k *knownHosts) refresh(path string, size int64) {
	if f := k.file(path); f.err == nil && f.size == size {
		return
	}
	f := loadKnownFile(path)
	k.mu.Lock()
	k.files[path] = f
	k.mu.Unlock()
}

// appended adds what record wrote to path.
func (k *knownHosts) appended(path string, b []byte) {
	f := k.file(path)
	k.mu.Lock()
	defer k.mu.Unlock()
	if f.err == nil {
		f.add(b)
	}
}

// add indexes the lines of b, which follows what f holds.
func (f *knownFile) add(b []byte) {
	if len(b) == 0 {
		return
	}
	if f.literal == nil {
		f.literal = map[string][]int{}
	}
	f.empty = false
	f.size += int64(len(b))
	for first := true; len(b) > 0; first = false {
		line := b
		cont := first && f.open // the rest of a last line that had no newline
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b, f.open = b[:i], b[i+1:], false
		} else {
			b, f.open = nil, true
		}
		if cont {
			continue // only ever empty: record starts on a fresh line
		}
		f.count++
		line = trimKnown(bytes.TrimSuffix(line, []byte("\r")))
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		f.lines = append(f.lines, knownLine{num: f.count, text: line})
		f.classify(len(f.lines) - 1)
	}
}

// classify files line at under the hosts it may name, reading its host
// field the way knownhosts does (first word, after an optional marker).
// Anything unusual goes to others, which every lookup includes.
func (f *knownFile) classify(at int) {
	line := f.lines[at].text
	word, rest := nextKnownWord(line)
	if strings.HasPrefix(word, "@") { // @cert-authority, @revoked, or invalid
		f.others = append(f.others, at)
		return
	}
	pattern := word
	if len(rest) == 0 {
		f.others = append(f.others, at)
		return
	}
	if strings.HasPrefix(pattern, "|") {
		if salt, hash, ok := decodeHashed(pattern); ok {
			f.hashed = append(f.hashed, hashedLine{at: at, salt: salt, hash: hash})
		} else {
			f.others = append(f.others, at)
		}
		return
	}
	if strings.ContainsAny(pattern, "*?!") {
		f.others = append(f.others, at)
		return
	}
	var keys []string
	for _, p := range strings.Split(pattern, ",") {
		if p == "" {
			continue
		}
		// As knownhosts reads a pattern: [host]:port, host:port, or host
		// (port 22).
		host, port, err := net.SplitHostPort(p)
		if err != nil {
			if p[0] == '[' {
				f.others = append(f.others, at) // invalid: knownhosts decides
				return
			}
			host, port = p, "22"
		}
		keys = append(keys, host+" "+port)
	}
	for _, key := range keys {
		if l := f.literal[key]; len(l) == 0 || l[len(l)-1] != at {
			f.literal[key] = append(l, at)
		}
	}
}

// nextKnownWord is knownhosts' word split: up to a space or tab, the rest
// trimmed; rest is nil when there is none.
func nextKnownWord(line []byte) (string, []byte) {
	i := bytes.IndexAny(line, "\t ")
	if i < 0 {
		return string(line), nil
	}
	return string(line[:i]), trimKnown(line[i:])
}

// trimKnown trims what knownhosts trims: spaces and tabs.
func trimKnown(b []byte) []byte { return bytes.Trim(b, " \t") }

// decodeHashed splits OpenSSH's hashed host name, |1|base64(salt)|base64(hash).
func decodeHashed(s string) (salt, hash []byte, ok bool) {
	parts := strings.Split(s, "|")
	if len(parts) != 4 || parts[0] != "" || parts[1] != "1" {
		return nil, nil, false
	}
	salt, err1 := base64.StdEncoding.DecodeString(parts[2])
	hash, err2 := base64.StdEncoding.DecodeString(parts[3])
	return salt, hash, err1 == nil && err2 == nil
}

// selectLines returns the lines of f that may name hostport, in file
// order. The caller holds k.mu (read).
func (f *knownFile) selectLines(hostport string) []knownLine {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return f.lines // cannot narrow: all of them
	}
	at := append([]int(nil), f.others...)
	at = append(at, f.literal[host+" "+port]...)
	if len(f.hashed) > 0 {
		name := []byte(knownhosts.Normalize(hostport))
		for _, h := range f.hashed {
			m := hmac.New(sha1.New, h.salt)
			m.Write(name)
			if hmac.Equal(m.Sum(nil), h.hash) {
				at = append(at, h.at)
			}
		}
	}
	slices.Sort(at)
	at = slices.Compact(at)
	out := make([]knownLine, len(at))
	for i, a := range at {
		out[i] = f.lines[a]
	}
	return out
}

// neverLine is a valid entry that names no host ("!*": every host is
// excluded). Each file handed to knownhosts ends with it, so a selection
// of only invalid lines is skipped as it is in the whole file, where
// knownhosts skips invalid lines when there are valid ones (a file with
// none was refused when it was loaded).
var neverLine = func() []byte {
	k, err := ssh.NewPublicKey(ed25519.PublicKey(make([]byte, ed25519.PublicKeySize)))
	if err != nil {
		panic(err)
	}
	return []byte("!* " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))))
}()

// db returns a knownhosts callback for hostport over files (those that
// name no key for it left out), and the files that hold entries at all.
func (k *knownHosts) db(files []string, hostport string) (ssh.HostKeyCallback, []string, error) {
	type part struct {
		path  string
		lines []knownLine
	}
	var parts []part
	var present []string
	for _, path := range files {
		f := k.file(path)
		if f.err != nil {
			return nil, nil, f.err
		}
		k.mu.RLock()
		empty, lines := f.empty, f.selectLines(hostport)
		k.mu.RUnlock()
		if empty {
			continue
		}
		present = append(present, path)
		if len(lines) > 0 {
			parts = append(parts, part{path, lines})
		}
	}
	var nums [][]int // per part: line number in the part → in the file
	var contents [][]byte
	var names []string
	for _, p := range parts {
		var b bytes.Buffer
		num := []int{0}
		for _, l := range p.lines {
			b.Write(l.text)
			b.WriteByte('\n')
			num = append(num, l.num)
		}
		b.Write(neverLine)
		b.WriteByte('\n')
		contents, names, nums = append(contents, b.Bytes()), append(names, p.path), append(nums, num)
	}
	cb, err := parseKnownHostsFiles(names, contents, nums)
	if err != nil {
		return nil, nil, err
	}
	return cb, present, nil
}

// parseKnownHosts has knownhosts read one file's content b (named path).
// nums, when set, maps its line numbers to the file's.
func parseKnownHosts(path string, b []byte, nums []int) (ssh.HostKeyCallback, error) {
	var n [][]int
	if nums != nil {
		n = [][]int{nums}
	}
	return parseKnownHostsFiles([]string{path}, [][]byte{b}, n)
}

// parseKnownHostsFiles hands contents to knownhosts, which reads only by
// name, as in-memory files; the callback's errors name the real files
// (and lines, through nums).
func parseKnownHostsFiles(paths []string, contents [][]byte, nums [][]int) (ssh.HostKeyCallback, error) {
	type origin struct {
		path string
		nums []int
	}
	real := map[string]origin{}
	var mem []string
	for i, b := range contents {
		m, err := memFile(paths[i], b)
		if err != nil {
			return nil, fmt.Errorf("known_hosts %s: %w", paths[i], err)
		}
		defer m.Close()
		name := "/proc/self/fd/" + strconv.Itoa(int(m.Fd()))
		o := origin{path: paths[i]}
		if nums != nil {
			o.nums = nums[i]
		}
		real[name] = o
		mem = append(mem, name)
	}
	cb, err := knownhosts.New(mem...)
	if err != nil {
		msg := err.Error()
		for name, o := range real {
			msg = strings.ReplaceAll(msg, name+":", o.path+":")
		}
		return nil, fmt.Errorf("known_hosts: %s", msg)
	}
	fix := func(k *knownhosts.KnownKey) {
		o := real[k.Filename]
		k.Filename = o.path
		if o.nums != nil && k.Line >= 0 && k.Line < len(o.nums) {
			k.Line = o.nums[k.Line]
		}
	}
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		err := cb(hostname, remote, key)
		var ke *knownhosts.KeyError
		if errors.As(err, &ke) {
			for i := range ke.Want {
				fix(&ke.Want[i])
			}
		}
		var re *knownhosts.RevokedError
		if errors.As(err, &re) {
			fix(&re.Revoked)
		}
		return err
	}, nil
}

// authorities reports whether a @cert-authority line of files applies to
// hostport: the host's certificate is then what the dial asks for first,
// as OpenSSH does.
func (k *knownHosts) authorities(files []string, hostport string) bool {
	for _, path := range files {
		f := k.file(path)
		if f.err != nil {
			continue
		}
		k.mu.RLock()
		lines := f.selectLines(hostport)
		k.mu.RUnlock()
		for _, l := range lines {
			rest, ok := bytes.CutPrefix(l.text, []byte("@cert-authority"))
			if !ok || len(rest) == 0 || (rest[0] != ' ' && rest[0] != '\t') {
				continue
			}
			// The line without its marker names the CA's key as the
			// host's: the key is accepted where the patterns match.
			fields := strings.Fields(string(rest))
			if len(fields) < 3 {
				continue
			}
			key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(strings.Join(fields[1:], " ")))
			if err != nil {
				continue
			}
			cb, err := parseKnownHosts(path, append(bytes.TrimSpace(rest), '\n'), nil)
			if err == nil && cb(hostport, probeAddr(hostport), key) == nil {
				return true
			}
		}
	}
	return false
}
