package sshexec

import (
	"bytes"
	"errors"
	"io"
	"os/exec"
	"sync"

	"golang.org/x/crypto/ssh"
)

// link is the connection a Remote runs its sessions over: Go's SSH client
// (goLink, dial.go), or the system's OpenSSH client, one master process
// whose control socket carries every session (systemLink, system.go).
type link interface {
	// newSession opens one session on the link.
	newSession() (session, error)
	// wait blocks until the link is gone and says why.
	wait() error
	// close ends the link, and with it every session on it.
	close() error
}

// session is one command on the node: the part of *ssh.Session a Remote
// uses. Wait's error is an exit status (exitStatus) when the command ran
// and exited non-zero, anything else when the session ended otherwise.
type session interface {
	StdinPipe() (io.WriteCloser, error)
	StdoutPipe() (io.Reader, error)
	StderrPipe() (io.Reader, error)
	Start(cmd string) error
	Wait() error
	Close() error
}

// goLink is Go's SSH client as a link.
type goLink struct{ *ssh.Client }

func (l goLink) newSession() (session, error) {
	s, err := l.NewSession()
	if err != nil {
		return nil, err // not a nil *ssh.Session in a session that is not nil
	}
	return s, nil
}

func (l goLink) wait() error  { return l.Wait() }
func (l goLink) close() error { return l.Close() }

// exitStatus is the status of a command that ran and exited non-zero, from
// a session's Wait: ok is false for any other end (the link lost, the
// session closed, the command killed by a signal).
func exitStatus(err error) (code int, ok bool) {
	var se *ssh.ExitError
	if errors.As(err, &se) {
		return se.ExitStatus(), true
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() >= 0 {
		return ee.ExitCode(), true
	}
	return 0, false
}

// runSession runs cmd in s, stdin (nil: none) as its input, and returns
// what it wrote. Both outputs are read to their end before Wait, as an
// exec.Cmd's pipes must be.
func runSession(s session, cmd string, stdin io.Reader) (stdout, stderr []byte, err error) {
	var in io.WriteCloser
	if stdin != nil {
		if in, err = s.StdinPipe(); err != nil {
			return nil, nil, err
		}
	}
	outR, err := s.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	errR, err := s.StderrPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := s.Start(cmd); err != nil {
		return nil, nil, err
	}
	var outB, errB bytes.Buffer
	var reads sync.WaitGroup
	reads.Add(2)
	go func() { defer reads.Done(); _, _ = io.Copy(&outB, outR) }()
	go func() { defer reads.Done(); _, _ = io.Copy(&errB, errR) }()
	if in != nil {
		go func() { _, _ = io.Copy(in, stdin); in.Close() }()
	}
	reads.Wait()
	err = s.Wait()
	return outB.Bytes(), errB.Bytes(), err
}
