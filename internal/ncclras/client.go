package ncclras

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

// DefaultAddr is where NCCL's RAS threads listen when NCCL_RAS_ADDR is
// not set (NCCL_RAS_CLIENT_PORT in src/ras/ras_internal.h).
const DefaultAddr = "localhost:28028"

const (
	// protocolVersion is NCCL_RAS_CLIENT_PROTOCOL. The server answers with
	// its own version and ignores ours; NCCL's ncclras tool only warns on a
	// mismatch, and so the version is not checked here either.
	protocolVersion = 2

	// defaultTimeout and extraTimeout are RAS_COLLECTIVE_LEG_TIMEOUT_SEC
	// and RAS_COLLECTIVE_EXTRA_TIMEOUT_SEC: NCCL waits for unresponsive
	// processes up to the (TIMEOUT) leg timeout plus the extra one.
	defaultTimeout = 5 * time.Second
	extraTimeout   = 5 * time.Second

	// maxReport bounds what Query reads: a JSON dump takes about 700
	// bytes a rank, so this is room for some 90,000 ranks.
	maxReport = 64 << 20

	// maxComms bounds how many communicators Parse makes of the rows
	// of the text report's table, so that garbled counts cannot make it
	// allocate without end.
	maxComms = 1 << 16
)

// Query asks the NCCL RAS server at addr (DefaultAddr when empty; the
// caller knows the job's NCCL_RAS_ADDR) for the status of the job and
// returns the text report, the one NCCL's ncclras tool prints; verbose asks
// for VERBOSE STATUS, which names more of the outlying ranks. It gives up
// at ctx's deadline, and asks NCCL to stop waiting for unresponsive
// processes in time to answer before it. When the report is cut short, the
// text read so far is returned with the error: Parse reads what it can of
// it. Query keeps no state between calls, so calls may run at once.
func Query(ctx context.Context, addr string, verbose bool) (string, error) {
	return query(ctx, addr, verbose, false)
}

// QueryJSON is Query asking for NCCL's JSON dump (SET FORMAT json,
// NCCL >= 2.28.7), the only form that gives every rank's collective counts
// even when they agree. An older server refuses the command, and then the
// text report is returned instead; Parse reads both.
func QueryJSON(ctx context.Context, addr string) (string, error) {
	return query(ctx, addr, false, true)
}

func query(ctx context.Context, addr string, verbose, asJSON bool) (string, error) {
	if addr == "" {
		addr = DefaultAddr
	}
	fail := func(err error) error {
		return fmt.Errorf("nccl ras at %s: %w", addr, cause(ctx, err))
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", fail(err)
	}
	defer conn.Close()
	// Every read and write below blocks on the connection, so ctx reaches
	// them as a connection deadline: its own, or one in the past the moment
	// it is cancelled.
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	br := bufio.NewReader(conn)
	// exchange sends one command and reads its one-line answer, the way
	// NCCL's ncclras tool does before it asks for the status.
	exchange := func(cmd string) (string, error) {
		if _, err := io.WriteString(conn, cmd+"\n"); err != nil {
			return "", fmt.Errorf("send %s: %w", cmd, err)
		}
		// ReadSlice bounds the answer by the reader's buffer.
		line, err := br.ReadSlice('\n')
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("connection closed: %w", io.ErrUnexpectedEOF)
		}
		if err != nil {
			return "", fmt.Errorf("answer to %s: %w", cmd, err)
		}
		return strings.TrimRight(string(line), "\r\n"), nil
	}

	hello := fmt.Sprintf("CLIENT PROTOCOL %d", protocolVersion)
	reply, err := exchange(hello)
	if err != nil {
		return "", fail(err)
	}
	if !hasPrefixFold(reply, "SERVER PROTOCOL ") {
		return "", fail(fmt.Errorf("unexpected answer %q to %s", reply, hello))
	}
	if secs, ok := timeoutFor(ctx); ok {
		cmd := fmt.Sprintf("TIMEOUT %d", secs)
		if reply, err = exchange(cmd); err != nil {
			return "", fail(err)
		}
		if !strings.EqualFold(reply, "OK") {
			return "", fail(fmt.Errorf("unexpected answer %q to %s", reply, cmd))
		}
	}
	if asJSON {
		// Servers before 2.28.7 answer "ERROR: Unknown command ...": the
		// text report it is then.
		if _, err = exchange("SET FORMAT json"); err != nil {
			return "", fail(err)
		}
	}
	cmd := "STATUS"
	if verbose {
		cmd = "VERBOSE STATUS"
	}
	if _, err := io.WriteString(conn, cmd+"\n"); err != nil {
		return "", fail(fmt.Errorf("send %s: %w", cmd, err))
	}
	// The server sends the report in pieces as its data comes in, and
	// closes the connection after the last one.
	report, err := io.ReadAll(io.LimitReader(br, maxReport+1))
	if err != nil {
		return string(report), fail(fmt.Errorf("read report: %w", err))
	}
	if len(report) > maxReport {
		return string(report[:maxReport]), fail(fmt.Errorf("report longer than %d bytes", maxReport))
	}
	return string(report), nil
}

// timeoutFor is the TIMEOUT to send so that NCCL answers, with what it has,
// before ctx's deadline; ok is false when NCCL's default already fits. A
// second is left for the report to travel.
func timeoutFor(ctx context.Context) (secs int, ok bool) {
	dl, has := ctx.Deadline()
	if !has {
		return 0, false
	}
	left := time.Until(dl) - extraTimeout - time.Second
	if left >= defaultTimeout {
		return 0, false
	}
	// Whole seconds, as older servers parse it with strtol; and never 0,
	// which turns NCCL's timeout off.
	return max(1, int(left/time.Second)), true
}

// cause prefers ctx's error, so that callers can match
// context.DeadlineExceeded and context.Canceled. The connection deadline
// set from ctx can fire a moment before ctx reports it.
func cause(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		return fmt.Errorf("%w: %w", ctxErr, err)
	}
	if dl, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(dl) {
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return err
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
