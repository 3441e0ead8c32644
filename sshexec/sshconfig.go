package sshexec

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/internal/inputfile"
	"github.com/kevinburke/ssh_config"
)

// sshConfig is the OpenSSH client configuration, as `ssh` reads it: the file
// given with -F alone, or else ~/.ssh/config then /etc/ssh/ssh_config. For
// each keyword the first value found wins, file by file, block by block,
// an Include standing for the files it names at its place.
type sshConfig struct {
	files    []*configFile
	warnings []string // what was skipped
	// home and localUser, when set (once per fan-out), spare each
	// resolveHost looking them up.
	home, localUser string
}

// configFile is one parsed file. The parser would read Include files
// itself, without bounds and without neutralizeMatch, so each Include line
// is replaced before parsing by an includeKey line whose value indexes
// includes, and lookup walks into those files where the line stands.
type configFile struct {
	name     string
	cfg      *ssh_config.Config
	includes [][]*configFile
	idx      hostIndex // built once at parse; read-only afterwards
}

// includeKey stands for an Include line in the parsed text.
const includeKey = "GorunInclude"

// maxIncludeDepth bounds nested Includes, as OpenSSH does (16), so a file
// that includes itself fails instead of recursing forever.
const maxIncludeDepth = 16

// loadSSHConfig reads the configuration. An explicit file must exist; the
// default files may be missing. Every file, Includes too, is read through
// inputfile: a FIFO or device named by mistake is refused, not waited on.
func loadSSHConfig(explicit, home string) (*sshConfig, error) {
	paths := []string{explicit}
	if explicit == "" {
		paths = []string{filepath.Join(home, ".ssh", "config"), systemSSHConfig}
	}
	c := &sshConfig{}
	for _, p := range paths {
		b, err := readFile(p, inputfile.DefaultMax)
		if explicit == "" && errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("ssh config: %w", err)
		}
		f, warnings, err := parseConfigFile(p, b, home, p == systemSSHConfig, 0)
		c.warnings = append(c.warnings, warnings...)
		if err != nil && explicit == "" {
			// A distribution's config (or an Include of it) that the parser
			// cannot read should not make every node unreachable.
			c.warnings = append(c.warnings, fmt.Sprintf("ssh config %s ignored: %v", p, err))
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("ssh config %s: %w", p, err)
		}
		c.files = append(c.files, f)
	}
	return c, nil
}

// readFile reads a config-like file through inputfile, so a FIFO or device
// named by mistake is refused rather than waited on or read forever;
// os.DevNull, the usual way to say "none" (ssh -F /dev/null,
// UserKnownHostsFile /dev/null), reads as empty.
func readFile(path string, max int64) ([]byte, error) {
	if path == os.DevNull {
		return nil, nil
	}
	return inputfile.Read(path, max)
}

// systemSSHConfig is OpenSSH's system-wide client configuration; relative
// Include paths in it (and in what it includes) are under /etc/ssh.
const systemSSHConfig = "/etc/ssh/ssh_config"

// parseConfigFile parses b, the content of name, with its Includes read
// and parsed in turn. It returns what it skipped as warnings.
func parseConfigFile(name string, b []byte, home string, system bool, depth int) (*configFile, []string, error) {
	b, skipped := neutralizeMatch(b)
	var warnings []string
	for _, w := range skipped {
		warnings = append(warnings, fmt.Sprintf("ssh config %s: %s", name, w))
	}
	b, includes := extractIncludes(b)
	f := &configFile{name: name}
	for _, inc := range includes {
		if depth >= maxIncludeDepth {
			return nil, warnings, &includeLoopError{file: name, line: inc.line}
		}
		var files []*configFile
		for _, pattern := range inc.patterns {
			matches, err := filepath.Glob(includePath(pattern, home, system))
			if err != nil {
				return nil, warnings, fmt.Errorf("line %d: Include %s: %w", inc.line, pattern, err)
			}
			// A pattern that matches nothing is skipped, as OpenSSH does.
			for _, m := range matches {
				data, err := readFile(m, inputfile.DefaultMax)
				if err != nil {
					return nil, warnings, fmt.Errorf("line %d: Include %s: %w", inc.line, pattern, err)
				}
				sub, w, err := parseConfigFile(m, data, home, system, depth+1)
				warnings = append(warnings, w...)
				var loop *includeLoopError
				if errors.As(err, &loop) {
					return nil, warnings, err // said once, not once per level
				}
				if err != nil {
					return nil, warnings, fmt.Errorf("line %d: Include %s: %s: %w", inc.line, pattern, m, err)
				}
				files = append(files, sub)
			}
		}
		f.includes = append(f.includes, files)
	}
	cfg, err := ssh_config.DecodeBytes(b)
	if err != nil {
		return nil, warnings, err
	}
	f.cfg = cfg
	f.index()
	return f, warnings, nil
}

// includeLoopError is Includes nested past maxIncludeDepth.
type includeLoopError struct {
	file string
	line int
}

func (e *includeLoopError) Error() string {
	return fmt.Sprintf("Includes nested more than %d deep, at %s line %d (does a file include itself?)", maxIncludeDepth, e.file, e.line)
}

// include is one Include line: where, and its file patterns.
type include struct {
	line     int
	patterns []string
}

// extractIncludes replaces each Include line by "GorunInclude N", N
// indexing the returned includes, keeping line numbers.
func extractIncludes(b []byte) ([]byte, []include) {
	lines := strings.Split(string(b), "\n")
	var incs []include
	for i, line := range lines {
		key, rest, ok := splitKeyword(line)
		if !ok || !strings.EqualFold(key, "include") {
			continue
		}
		var patterns []string
		for _, p := range strings.Fields(rest) {
			if len(p) >= 2 && p[0] == '"' && p[len(p)-1] == '"' {
				p = p[1 : len(p)-1]
			}
			patterns = append(patterns, p)
		}
		lines[i] = includeKey + " " + strconv.Itoa(len(incs))
		incs = append(incs, include{line: i + 1, patterns: patterns})
	}
	return []byte(strings.Join(lines, "\n")), incs
}

// includePath is where an Include pattern points: absolute as written, ~/
// under home, else relative to ~/.ssh (or /etc/ssh in the system file).
func includePath(p, home string, system bool) string {
	switch {
	case filepath.IsAbs(p):
		return p
	case p == "~" || strings.HasPrefix(p, "~/"):
		return filepath.Join(home, strings.TrimPrefix(p, "~"))
	case system:
		return filepath.Join("/etc/ssh", p)
	default:
		return filepath.Join(home, ".ssh", p)
	}
}

// splitKeyword splits an ssh_config line into its keyword and the rest
// ("Key value", "Key=value", "Key = value"), dropping a trailing comment;
// ok is false for blank and comment lines.
func splitKeyword(line string) (key, rest string, ok bool) {
	trimmed := strings.TrimSpace(line)
	if trimmed == "" || trimmed[0] == '#' {
		return "", "", false
	}
	i := strings.IndexAny(trimmed, " \t=")
	if i < 0 {
		return trimmed, "", true
	}
	key, rest = trimmed[:i], strings.TrimLeft(trimmed[i:], " \t")
	rest = strings.TrimPrefix(rest, "=")
	rest, _, _ = strings.Cut(rest, "#")
	return key, strings.TrimSpace(rest), true
}

// hostConfig is what ssh_config says for one host: the key-value lines
// of every block that matches it, in the order ssh reads them (file by
// file, block by block, an Include's files where the Include stands).
type hostConfig []*ssh_config.KV

// forHost collects the lines that apply to host, once per dial, so each
// keyword is then looked up among those few lines instead of across every
// block of every file.
func (c *sshConfig) forHost(host string) hostConfig {
	var out hostConfig
	for _, f := range c.files {
		out = f.collect(host, out)
	}
	return out
}

// get returns the first value of key, or "".
func (hc hostConfig) get(key string) string {
	for _, kv := range hc {
		if strings.EqualFold(kv.Key, key) {
			return kv.Value
		}
	}
	return ""
}

// getAll returns every value of key in order (IdentityFile is cumulative
// in OpenSSH).
func (hc hostConfig) getAll(key string) []string {
	var all []string
	for _, kv := range hc {
		if strings.EqualFold(kv.Key, key) {
			all = append(all, kv.Value)
		}
	}
	return all
}

// get returns the first value of key for host, or "".
func (c *sshConfig) get(host, key string) string { return c.forHost(host).get(key) }

// getAll returns every value of key for host, across all files in order.
func (c *sshConfig) getAll(host, key string) []string { return c.forHost(host).getAll(key) }

// collect appends the non-empty key-value lines of the blocks of f that
// match host to out, descending into Includes where they stand.
func (f *configFile) collect(host string, out hostConfig) hostConfig {
	for _, i := range f.candidates(host) {
		h := f.cfg.Hosts[i]
		if !h.Matches(host) {
			continue
		}
		for _, node := range h.Nodes {
			kv, ok := node.(*ssh_config.KV)
			if !ok || kv.Value == "" {
				continue
			}
			if strings.EqualFold(kv.Key, includeKey) {
				if n, err := strconv.Atoi(kv.Value); err == nil && n >= 0 && n < len(f.includes) {
					for _, sub := range f.includes[n] {
						out = sub.collect(host, out)
					}
					continue
				}
				// else a user's own "GorunInclude" line: an unknown keyword
			}
			out = append(out, kv)
		}
	}
	return out
}

// hostIndex finds the blocks of a file that may match a host without
// trying every block's patterns: a generated cluster config has one
// "Host nodeN" block per node, and trying them all for every node is
// quadratic in the node count.
type hostIndex struct {
	literal map[string][]int // block indices by each of their patterns, for blocks of plain names only
	others  []int            // blocks with a wildcard or a negation: always tried
}

// index builds f's hostIndex. A block whose patterns are all plain names
// (no *, ?, or !) can only match a host spelled exactly like one of them
// (ssh_config's patterns are case-sensitive, anchored regular expressions
// of the escaped name); every other block stays a candidate for every
// host. Host.Matches still decides, so the index only skips blocks that
// could not match.
func (f *configFile) index() {
	f.idx.literal = map[string][]int{}
	for i, h := range f.cfg.Hosts {
		plain := len(h.Patterns) > 0
		for _, p := range h.Patterns {
			if s := p.String(); s == "" || strings.ContainsAny(s, "*?!") {
				plain = false
			}
		}
		if !plain {
			f.idx.others = append(f.idx.others, i)
			continue
		}
		for _, p := range h.Patterns {
			s := p.String()
			if l := f.idx.literal[s]; len(l) == 0 || l[len(l)-1] != i {
				f.idx.literal[s] = append(l, i)
			}
		}
	}
}

// candidates returns, in file order, the indices of the blocks that may
// match host.
func (f *configFile) candidates(host string) []int {
	lit := f.idx.literal[host]
	if len(lit) == 0 {
		return f.idx.others
	}
	if len(f.idx.others) == 0 {
		return lit
	}
	out := make([]int, 0, len(lit)+len(f.idx.others))
	a, b := f.idx.others, lit
	for len(a) > 0 && len(b) > 0 {
		if a[0] < b[0] {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}

// matchCriteria are the Match keywords of OpenSSH. The parser understands
// only "Match all" and "Match host <patterns>".
var matchCriteria = map[string]bool{
	"all": true, "canonical": true, "final": true, "exec": true, "localnetwork": true,
	"host": true, "originalhost": true, "tagged": true, "command": true, "user": true,
	"localuser": true, "address": true, "localaddress": true, "localport": true, "rdomain": true,
	"version": true, "sessiontype": true,
}

// neutralizeMatch turns each Match line the parser cannot evaluate into
// "Host !*", a block that matches no host, keeping line numbers, and says
// which it skipped. The rest of the file keeps working.
func neutralizeMatch(b []byte) ([]byte, []string) {
	lines := strings.Split(string(b), "\n")
	var skipped []string
	for i, line := range lines {
		key, rest, ok := splitKeyword(line)
		if !ok || !strings.EqualFold(key, "match") {
			continue
		}
		fields := strings.Fields(rest)
		supported := len(fields) == 1 && strings.EqualFold(fields[0], "all")
		if len(fields) >= 2 && strings.EqualFold(fields[0], "host") {
			supported = true
			for _, f := range fields[1:] {
				if matchCriteria[strings.ToLower(f)] {
					supported = false
				}
			}
		}
		if !supported {
			lines[i] = "Host !*"
			skipped = append(skipped, fmt.Sprintf("line %d: %q not supported by gorun; that block is ignored", i+1, strings.TrimSpace(line)))
		}
	}
	return []byte(strings.Join(lines, "\n")), skipped
}

// hostSettings is everything needed to reach one host: ssh_config merged
// with the command line (which wins) and OpenSSH's defaults.
type hostSettings struct {
	Alias          string // the name the user gave, matched against Host patterns
	HostName       string // what is dialled
	User           string
	Port           int
	IdentityFiles  []string
	IdentitiesOnly bool
	ProxyJump      string // "" for a direct connection
	KnownHosts     []string
	GlobalKnown    []string
	HostKeyAlias   string
	HashKnownHosts bool
	AcceptNew      bool
	ConnectTimeout time.Duration
	Warnings       []string
}

// Defaults that match OpenSSH where it has one, and gorun's needs where not.
const (
	DefaultConnectTimeout    = 10 * time.Second
	DefaultKeepaliveInterval = 3 * time.Second
	DefaultKeepaliveMax      = 3
)

// splitUserHostPort parses [user@]host[:port] (host may be a [bracketed] IPv6
// address; a bare IPv6 address has no port).
func splitUserHostPort(s string) (userName, host string, port int, err error) {
	if i := strings.LastIndexByte(s, '@'); i >= 0 {
		userName, s = s[:i], s[i+1:]
	}
	host = s
	if h, p, e := net.SplitHostPort(s); e == nil {
		n, e := strconv.Atoi(p)
		if e != nil || n < 1 || n > 65535 {
			return "", "", 0, fmt.Errorf("%q: bad port %q", s, p)
		}
		host, port = h, n
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		host = s[1 : len(s)-1]
	}
	if host == "" {
		return "", "", 0, fmt.Errorf("%q: empty host name", s)
	}
	return userName, host, port, nil
}

// resolveHost works out how to reach target ("node1", "alice@node1:2222")
// the way `ssh target` would, with cfg's flags taking precedence over
// ssh_config.
func resolveHost(target string, cfg Config, conf *sshConfig) (hostSettings, error) {
	specUser, alias, specPort, err := splitUserHostPort(target)
	if err != nil {
		return hostSettings{}, err
	}
	s := hostSettings{Alias: alias, Warnings: append([]string(nil), conf.warnings...)}
	hc := conf.forHost(alias)
	get := hc.get

	home, local := conf.home, conf.localUser
	if home == "" {
		home = homeDir()
	}
	if local == "" {
		local = currentUser()
	}

	s.HostName = alias
	if v := get("HostName"); v != "" {
		s.HostName = expandTokens(v, tokenValues{host: alias, alias: alias, localUser: local, home: home})
	}

	s.User = firstNonEmpty(specUser, cfg.User, get("User"), local)

	s.Port = 22
	if v := get("Port"); v != "" {
		n, e := strconv.Atoi(v)
		if e != nil || n < 1 || n > 65535 {
			return s, fmt.Errorf("ssh config: host %s: bad Port %q", alias, v)
		}
		s.Port = n
	}
	if cfg.Port != 0 {
		s.Port = cfg.Port
	}
	if specPort != 0 {
		s.Port = specPort
	}

	tv := tokenValues{host: s.HostName, alias: alias, user: s.User, localUser: local, home: home, port: s.Port}

	if cfg.Identity != "" {
		s.IdentityFiles = append(s.IdentityFiles, expandTokens(cfg.Identity, tv))
	}
	for _, id := range hc.getAll("IdentityFile") {
		s.IdentityFiles = append(s.IdentityFiles, expandTokens(id, tv))
	}
	s.IdentitiesOnly = strings.EqualFold(get("IdentitiesOnly"), "yes")

	if v := get("ProxyCommand"); v != "" && !strings.EqualFold(v, "none") {
		return s, fmt.Errorf("ssh config: host %s: ProxyCommand is not supported by gorun; use ProxyJump", alias)
	}
	if v := get("ProxyJump"); v != "" && !strings.EqualFold(v, "none") {
		s.ProxyJump = expandJumpTokens(v, tv)
	}

	if cfg.KnownHosts != "" {
		s.KnownHosts = []string{expandTokens(cfg.KnownHosts, tv)}
	} else if v := get("UserKnownHostsFile"); v != "" {
		for _, f := range strings.Fields(v) {
			s.KnownHosts = append(s.KnownHosts, expandTokens(f, tv))
		}
	} else {
		s.KnownHosts = []string{filepath.Join(home, ".ssh", "known_hosts"), filepath.Join(home, ".ssh", "known_hosts2")}
	}
	if v := get("GlobalKnownHostsFile"); v != "" {
		for _, f := range strings.Fields(v) {
			s.GlobalKnown = append(s.GlobalKnown, expandTokens(f, tv))
		}
	} else {
		s.GlobalKnown = []string{"/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"}
	}
	s.HostKeyAlias = get("HostKeyAlias")
	s.HashKnownHosts = strings.EqualFold(get("HashKnownHosts"), "yes")

	s.AcceptNew = cfg.AcceptNew
	switch v := strings.ToLower(get("StrictHostKeyChecking")); v {
	case "", "yes", "ask":
	case "accept-new":
		// The user's own config asks for OpenSSH's accept-new: record
		// unknown keys, still refuse changed ones.
		s.AcceptNew = true
	case "no", "off":
		s.Warnings = append(s.Warnings, fmt.Sprintf(
			"ssh config: host %s: StrictHostKeyChecking %s ignored: gorun always verifies host keys (use --ssh-accept-new to record unknown ones)", alias, v))
	default:
		return s, fmt.Errorf("ssh config: host %s: bad StrictHostKeyChecking %q", alias, v)
	}

	s.ConnectTimeout = DefaultConnectTimeout
	if v := get("ConnectTimeout"); v != "" {
		n, e := strconv.Atoi(v)
		if e != nil || n < 0 {
			return s, fmt.Errorf("ssh config: host %s: bad ConnectTimeout %q", alias, v)
		}
		if n > 0 {
			s.ConnectTimeout = time.Duration(n) * time.Second
		}
	}
	if cfg.ConnectTimeout > 0 {
		s.ConnectTimeout = cfg.ConnectTimeout
	}
	return s, nil
}

// tokenValues feeds the %-tokens and ~ of ssh_config paths.
type tokenValues struct {
	host, alias, user, localUser, home string
	port                               int
}

// expandTokens expands a leading ~ and the ssh_config tokens %h %n %p %r %u
// %d %% of a path (IdentityFile, UserKnownHostsFile); other tokens are left
// as written.
func expandTokens(s string, tv tokenValues) string {
	if s == "~" {
		s = tv.home
	} else if strings.HasPrefix(s, "~/") {
		s = filepath.Join(tv.home, s[2:])
	}
	return tv.expand(s, "hnprud")
}

// expandJumpTokens expands the tokens ssh_config(5) allows in ProxyJump:
// %% %h %n %p %r, the destination's, so "ProxyJump %r@gw-%h" picks a
// gateway per host. There is no ~ in a host name.
func expandJumpTokens(s string, tv tokenValues) string {
	return tv.expand(s, "hnpr")
}

// expand replaces %% and each %X with X in allowed; other tokens are left
// as written.
func (tv tokenValues) expand(s, allowed string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		c := s[i]
		if c != '%' && strings.IndexByte(allowed, c) < 0 {
			b.WriteByte('%')
			b.WriteByte(c)
			continue
		}
		switch c {
		case '%':
			b.WriteByte('%')
		case 'h':
			b.WriteString(tv.host)
		case 'n':
			b.WriteString(tv.alias)
		case 'p':
			b.WriteString(strconv.Itoa(tv.port))
		case 'r':
			b.WriteString(tv.user)
		case 'u':
			b.WriteString(tv.localUser)
		case 'd':
			b.WriteString(tv.home)
		}
	}
	return b.String()
}

func homeDir() string {
	if h, err := os.UserHomeDir(); err == nil {
		return h
	}
	if u, err := user.Current(); err == nil {
		return u.HomeDir
	}
	return "/"
}

func currentUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return os.Getenv("USER")
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
