package sshexec

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/go-multierror"
	"golang.org/x/crypto/ssh/knownhosts"
)

func TestForEachErrorFormat(t *testing.T) {
	hke := &HostKeyError{Host: "c", Kind: ErrUnknownHost}
	tests := []struct {
		name  string
		fail  map[string]error
		hosts []string
		want  string
	}{
		{name: "one", hosts: []string{"a", "b"},
			fail: map[string]error{"b": errors.New("connection refused")},
			want: "node b: connection refused"},
		{name: "two, in input order", hosts: []string{"b", "a", "c"},
			fail: map[string]error{"a": errors.New("refused"), "c": fmt.Errorf("ssh handshake: %w", errors.New("EOF"))},
			want: "node a: refused\nnode c: ssh handshake: EOF"},
		{name: "a cause of several lines stays on its host's line", hosts: []string{"a", "b"},
			fail: map[string]error{"a": errors.Join(errors.New("first"), errors.New("second")), "b": errors.New("x\n\n")},
			want: "node a: first; second\nnode b: x"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ForEach(context.Background(), tc.hosts, 0, func(_ context.Context, h string) error { return tc.fail[h] })
			if err == nil {
				t.Fatal("nil error")
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("message\n%q\nwant\n%q", got, tc.want)
			}
			for _, bad := range []string{"occurred", "\t", "* "} {
				if strings.Contains(err.Error(), bad) {
					t.Errorf("message holds %q: %q", bad, err.Error())
				}
			}
			var merr *multierror.Error
			if !errors.As(err, &merr) || len(merr.Errors) != len(tc.fail) {
				t.Fatalf("err = %#v, want a *multierror.Error of %d", err, len(tc.fail))
			}
			for _, cause := range tc.fail {
				if !errors.Is(err, cause) {
					t.Errorf("errors.Is(err, %v) is false", cause)
				}
			}
		})
	}

	t.Run("errors.As finds a *HostKeyError as main wraps it", func(t *testing.T) {
		err := ForEach(context.Background(), []string{"a", "c"}, 0, func(_ context.Context, h string) error {
			if h == "c" {
				return fmt.Errorf("jump host j: %w", hke)
			}
			return errors.New("refused")
		})
		wrapped := fmt.Errorf("%w:\n%w", errors.New("cannot reach every node"), err)
		var got *HostKeyError
		if !errors.As(wrapped, &got) || got != hke || !errors.Is(wrapped, ErrUnknownHost) {
			t.Errorf("errors.As(*HostKeyError) through %q: %v", wrapped, got)
		}
		var he *HostError
		if !errors.As(wrapped, &he) || he.Host != "a" {
			t.Errorf("errors.As(*HostError) = %v, want host a first", he)
		}
	})

	t.Run("after ctx ends, started or not, each item is named once", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		// Which items start is up to select; those that do fail as fn
		// does, with ctx's error, and the others with ctx's error too.
		err := ForEach(ctx, []string{"a", "b", "c"}, 1, func(ctx context.Context, _ string) error { return ctx.Err() })
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if want := "node a: context canceled\nnode b: context canceled\nnode c: context canceled"; err.Error() != want {
			t.Errorf("message\n%q\nwant\n%q", err.Error(), want)
		}
	})
}

// Refused ports need no server: each line names its node once.
func TestDialAllRefusedOneLinePerNode(t *testing.T) {
	home := isolate(t)
	conf := writeFile(t, filepath.Join(home, "ssh_config"),
		"Host nodea\n  HostName 127.0.0.1\n  Port 1\nHost nodeb\n  HostName 127.0.0.1\n  Port 2\n", 0o600)
	kh := writeFile(t, filepath.Join(home, "known_hosts"), "", 0o600)
	remotes, err := DialAll(context.Background(), []string{"nodea", "nodeb"}, Config{SSHConfigFile: conf, KnownHosts: kh}, 0)
	closeRemotes(remotes)
	if err == nil {
		t.Fatal("dials to refused ports succeeded")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "node nodea: ") || !strings.HasPrefix(lines[1], "node nodeb: ") {
		t.Fatalf("message %q, want one line for nodea then one for nodeb", err.Error())
	}
	for _, l := range lines {
		if strings.Count(l, "node node") != 1 {
			t.Errorf("line %q names its node other than once", l)
		}
	}
	// Dial alone still names the node.
	if _, err := Dial(context.Background(), "nodea", Config{SSHConfigFile: conf, KnownHosts: kh}); err == nil || !strings.HasPrefix(err.Error(), "node nodea: ") {
		t.Errorf("Dial error %v, want it to name nodea", err)
	}
}

// TestForEachCollapsesAlikeFailures: up to collapseAbove failing nodes
// print a line each; past it, nodes that failed alike share one line with
// a count and a compressed host list, plus the first one's own line.
func TestForEachCollapsesAlikeFailures(t *testing.T) {
	refused := func(h string) error {
		addr := "127.0.0." + strings.TrimPrefix(h, "n") + ":22"
		return fmt.Errorf("connect to %s: %w", addr, &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}})
	}
	names := func(n int) []string {
		var s []string
		for i := range n {
			s = append(s, fmt.Sprintf("n%d", i))
		}
		return s
	}
	tests := []struct {
		name  string
		hosts []string
		fail  func(h string) error
		want  []string // lines; "…" as the last stands for one line per node
	}{
		{name: "at the limit: one line per node", hosts: names(collapseAbove), fail: refused,
			want: []string{"node n0: connect to 127.0.0.0:22: dial tcp: connect: connection refused", "…"}},
		{name: "past it: one line and an example", hosts: names(1024), fail: refused,
			want: []string{"1024 nodes refused the connection: n[0-1023]",
				"  e.g. node n0: connect to 127.0.0.0:22: dial tcp: connect: connection refused"}},
		{name: "causes apart, the rare ones on their own lines", hosts: names(12), fail: func(h string) error {
			switch h {
			case "n3":
				k := mustKey(t).PublicKey()
				return &HostKeyError{Host: "n3", Kind: ErrHostKeyChanged, Key: k, Known: []knownhosts.KnownKey{{Key: k, Filename: "kh", Line: 1}}}
			case "n5", "n6", "n7", "n9":
				return fmt.Errorf("run true on %s at 10.1.0.%s:2222: exit code 1", h, h[1:])
			}
			return refused(h)
		}, want: []string{
			"7 nodes refused the connection: n[0-2,4,8,10-11]",
			"  e.g. node n0: connect to 127.0.0.0:22: dial tcp: connect: connection refused",
			"HOSTKEY",
			"4 nodes failed alike: n[5-7,9]",
			"  e.g. node n5: run true on n5 at 10.1.0.5:2222: exit code 1",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ForEach(context.Background(), tc.hosts, 4, func(_ context.Context, h string) error { return tc.fail(h) })
			lines := strings.Split(err.Error(), "\n")
			want := tc.want
			if want[len(want)-1] == "…" {
				if len(lines) != len(tc.hosts) {
					t.Fatalf("%d lines for %d nodes:\n%s", len(lines), len(tc.hosts), err)
				}
				want, lines = want[:len(want)-1], lines[:len(want)-1]
			}
			if len(lines) != len(want) {
				t.Fatalf("got\n%s\nwant\n%s", err, strings.Join(want, "\n"))
			}
			for i := range want {
				if want[i] == "HOSTKEY" {
					if !strings.HasPrefix(lines[i], "node n3: HOST KEY CHANGED") {
						t.Errorf("line %d = %q, want n3's own line", i, lines[i])
					}
					continue
				}
				if lines[i] != want[i] {
					t.Errorf("line %d\n%q\nwant\n%q", i, lines[i], want[i])
				}
			}
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Error("errors.Is no longer reaches the causes")
			}
		})
	}
}
