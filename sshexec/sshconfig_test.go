package sshexec

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestSSHConfigInclude(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string // under HOME; "config" is the -F file
		host    string
		key     string
		want    string
		all     []string // for IdentityFile, when set
		warn    string   // in a warning
		wantErr string
	}{
		{name: "relative to ~/.ssh, globbed in lexical order",
			files: map[string]string{"config": "Include conf.d/*\nUser late\n", ".ssh/conf.d/b": "User b\n", ".ssh/conf.d/a": "User a\n"},
			host:  "x", key: "User", want: "a"},
		{name: "values before the Include come first",
			files: map[string]string{"config": "User early\nInclude inc\n", ".ssh/inc": "User inc\n"},
			host:  "x", key: "User", want: "early"},
		{name: "~/ and absolute paths",
			files: map[string]string{"config": "Include ~/elsewhere/inc\n", "elsewhere/inc": "Port 2222\n"},
			host:  "x", key: "Port", want: "2222"},
		{name: "Include inside a Host block applies to that host only",
			files: map[string]string{"config": "Host gpu*\n  Include gpu.conf\nHost *\n  User fallback\n", ".ssh/gpu.conf": "User trainer\n"},
			host:  "cpu1", key: "User", want: "fallback"},
		{name: "Include inside a matching Host block",
			files: map[string]string{"config": "Host gpu*\n  Include gpu.conf\nHost *\n  User fallback\n", ".ssh/gpu.conf": "User trainer\n"},
			host:  "gpu1", key: "User", want: "trainer"},
		{name: "Host blocks of an included file",
			files: map[string]string{"config": "Include hosts.conf\nHost *\n  User fallback\n", ".ssh/hosts.conf": "Host n1\n  User one\nHost n2\n  User two\n"},
			host:  "n2", key: "User", want: "two"},
		{name: "cumulative keys gather across files",
			files: map[string]string{"config": "IdentityFile /k/1\nInclude inc\nIdentityFile /k/3\n", ".ssh/inc": "IdentityFile /k/2\n"},
			host:  "x", key: "IdentityFile", all: []string{"/k/1", "/k/2", "/k/3"}},
		{name: "nested Includes",
			files: map[string]string{"config": "Include one\n", ".ssh/one": "Include two\n", ".ssh/two": "User deep\n"},
			host:  "x", key: "User", want: "deep"},
		{name: "a pattern that matches nothing is skipped",
			files: map[string]string{"config": "Include nothing/*\nInclude missing\nUser u\n"},
			host:  "x", key: "User", want: "u"},
		{name: "Include /dev/null",
			files: map[string]string{"config": "Include /dev/null\nUser u\n"},
			host:  "x", key: "User", want: "u"},
		{name: "Include=, quoted",
			files: map[string]string{"config": "Include = \"inc\" # comment\n", ".ssh/inc": "User q\n"},
			host:  "x", key: "User", want: "q"},
		{name: "an unsupported Match in an included file is neutralized",
			files: map[string]string{"config": "Include inc\nUser after\n", ".ssh/inc": "Match exec \"true\"\n  User exec\n"},
			host:  "x", key: "User", want: "after", warn: "inc: line 1: \"Match exec \\\"true\\\"\" not supported"},
		{name: "a file including itself",
			files:   map[string]string{"config": "Include ~/config\n"},
			wantErr: "nested more than 16 deep, at "},
		{name: "an included FIFO is refused, not waited on",
			files:   map[string]string{"config": "Include fifo\n", ".ssh/fifo": "FIFO"},
			wantErr: "named pipe (FIFO)"},
		{name: "an included device is refused",
			files:   map[string]string{"config": "Include /dev/zero\n"},
			wantErr: "/dev/zero: is a character device"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			home := t.TempDir()
			for name, content := range tc.files {
				p := filepath.Join(home, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
					t.Fatal(err)
				}
				if content == "FIFO" {
					if err := syscall.Mkfifo(p, 0o600); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			c, err := loadSSHConfig(filepath.Join(home, "config"), home)
			if d := time.Since(start); d > time.Second {
				t.Errorf("loading took %v", d)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to say %q", err, tc.wantErr)
				}
				t.Log(err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.all != nil {
				if got := c.getAll(tc.host, tc.key); strings.Join(got, " ") != strings.Join(tc.all, " ") {
					t.Errorf("getAll(%s) = %q, want %q", tc.key, got, tc.all)
				}
			} else if got := c.get(tc.host, tc.key); got != tc.want {
				t.Errorf("get(%s, %s) = %q, want %q", tc.host, tc.key, got, tc.want)
			}
			warnings := strings.Join(c.warnings, "\n")
			if (tc.warn == "") != (warnings == "") || !strings.Contains(warnings, tc.warn) {
				t.Errorf("warnings = %q, want %q", c.warnings, tc.warn)
			}
		})
	}
}

// TestSSHConfigDefaultFilesBadInclude: a default file (~/.ssh/config) whose
// Include cannot be read is ignored with a warning, as one the parser
// cannot read is, rather than making every node unreachable; an absent
// one is simply skipped.
func TestSSHConfigDefaultFilesBadInclude(t *testing.T) {
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(home, ".ssh", "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".ssh", "config"), []byte("Include fifo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := loadSSHConfig("", home)
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(c.warnings, "\n"); !strings.Contains(w, "config ignored") || !strings.Contains(w, "named pipe") {
		t.Errorf("warnings = %q", c.warnings)
	}
}

func TestExpandTokens(t *testing.T) {
	tv := tokenValues{host: "10.1.2.3", alias: "gpu1", user: "alice", localUser: "bob", home: "/home/bob", port: 2200}
	tests := []struct {
		name, in, path, jump string
	}{
		{"plain", "bastion", "bastion", "bastion"},
		{"host, user, port", "%r@gw-%h:%p", "alice@gw-10.1.2.3:2200", "alice@gw-10.1.2.3:2200"},
		{"alias and percent", "%n%%x", "gpu1%x", "gpu1%x"},
		{"local user and home: paths only", "%u-%d", "bob-/home/bob", "%u-%d"},
		{"tilde: paths only", "~/.ssh/%n", "/home/bob/.ssh/gpu1", "~/.ssh/gpu1"},
		{"unknown token kept", "%C-%z", "%C-%z", "%C-%z"},
		{"trailing percent", "a%", "a%", "a%"},
		{"two hops", "%r@hop1,hop2-%n", "alice@hop1,hop2-gpu1", "alice@hop1,hop2-gpu1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := expandTokens(tc.in, tv); got != tc.path {
				t.Errorf("expandTokens(%q) = %q, want %q", tc.in, got, tc.path)
			}
			if got := expandJumpTokens(tc.in, tv); got != tc.jump {
				t.Errorf("expandJumpTokens(%q) = %q, want %q", tc.in, got, tc.jump)
			}
		})
	}
}

func TestResolveHostProxyJumpTokens(t *testing.T) {
	home := t.TempDir()
	cfgFile := filepath.Join(home, "cfg")
	conf := "Host gpu*\n  HostName %h.cluster\n  User trainer\n  Port 2201\n  ProxyJump %r@gw-%h:%p,jump-%n\n"
	if err := os.WriteFile(cfgFile, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := loadSSHConfig(cfgFile, home)
	if err != nil {
		t.Fatal(err)
	}
	s, err := resolveHost("gpu7", Config{}, c)
	if err != nil {
		t.Fatal(err)
	}
	if want := "trainer@gw-gpu7.cluster:2201,jump-gpu7"; s.ProxyJump != want {
		t.Errorf("ProxyJump = %q, want %q", s.ProxyJump, want)
	}
}
