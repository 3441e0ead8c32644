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

	"github.com/kevinburke/ssh_config"
)

// sshConfig is the OpenSSH client configuration, as `ssh` reads it: the file
// given with -F alone, or else ~/.ssh/config then /etc/ssh/ssh_config. For
// each keyword the first value found wins, file by file, block by block.
type sshConfig struct {
	files    []*ssh_config.Config
	names    []string // file names, for error messages
	warnings []string // what was skipped
}

// loadSSHConfig reads the configuration. An explicit file must exist; the
// default files may be missing.
func loadSSHConfig(explicit, home string) (*sshConfig, error) {
	paths := []string{explicit}
	if explicit == "" {
		paths = []string{filepath.Join(home, ".ssh", "config"), "/etc/ssh/ssh_config"}
	}
	c := &sshConfig{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if explicit == "" && errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("ssh config: %w", err)
		}
		b, skipped := neutralizeMatch(b)
		for _, w := range skipped {
			c.warnings = append(c.warnings, fmt.Sprintf("ssh config %s: %s", p, w))
		}
		f, err := ssh_config.DecodeBytes(b)
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
		c.names = append(c.names, p)
	}
	return c, nil
}

// get returns the first value of key for host, or "".
func (c *sshConfig) get(host, key string) (string, error) {
	for i, f := range c.files {
		v, err := f.Get(host, key)
		if err != nil {
			return "", fmt.Errorf("ssh config %s: %s: %w", c.names[i], key, err)
		}
		if v != "" {
			return v, nil
		}
	}
	return "", nil
}

// getAll returns every value of key for host, across all files in order
// (IdentityFile is cumulative in OpenSSH).
func (c *sshConfig) getAll(host, key string) ([]string, error) {
	var all []string
	for i, f := range c.files {
		v, err := f.GetAll(host, key)
		if err != nil {
			return nil, fmt.Errorf("ssh config %s: %s: %w", c.names[i], key, err)
		}
		all = append(all, v...)
	}
	return all, nil
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
		trimmed := strings.TrimSpace(line)
		key, rest, ok := strings.Cut(trimmed, " ")
		if k, r, eq := strings.Cut(trimmed, "="); eq && (!ok || len(k) < len(key)) {
			key, rest, ok = k, r, true
		}
		if !strings.EqualFold(strings.TrimSpace(key), "match") {
			continue
		}
		if c, _, _ := strings.Cut(rest, "#"); ok {
			rest = c
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
			skipped = append(skipped, fmt.Sprintf("line %d: %q not supported by gorun; that block is ignored", i+1, trimmed))
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
	get := func(key string) string {
		if err != nil {
			return ""
		}
		var v string
		v, err = conf.get(alias, key)
		return v
	}

	home := homeDir()
	local := currentUser()

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
	if err == nil {
		var ids []string
		ids, err = conf.getAll(alias, "IdentityFile")
		for _, id := range ids {
			s.IdentityFiles = append(s.IdentityFiles, expandTokens(id, tv))
		}
	}
	s.IdentitiesOnly = strings.EqualFold(get("IdentitiesOnly"), "yes")

	if v := get("ProxyCommand"); v != "" && !strings.EqualFold(v, "none") {
		return s, fmt.Errorf("ssh config: host %s: ProxyCommand is not supported by gorun; use ProxyJump", alias)
	}
	if v := get("ProxyJump"); v != "" && !strings.EqualFold(v, "none") {
		s.ProxyJump = v
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
	return s, err
}

// tokenValues feeds the %-tokens and ~ of ssh_config paths.
type tokenValues struct {
	host, alias, user, localUser, home string
	port                               int
}

// expandTokens expands a leading ~ and the ssh_config tokens %h %n %p %r %u
// %d %%; other tokens are left as written.
func expandTokens(s string, tv tokenValues) string {
	if s == "~" {
		s = tv.home
	} else if strings.HasPrefix(s, "~/") {
		s = filepath.Join(tv.home, s[2:])
	}
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
		switch s[i] {
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
		default:
			b.WriteByte('%')
			b.WriteByte(s[i])
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
