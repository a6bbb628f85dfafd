package resp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ErrNoServer reports that redis-server is not installed.
var ErrNoServer = errors.New("resp: redis-server not found in PATH (Debian: apt-get install redis-server)")

// Server is a redis-server process started for one benchmark run: loopback
// only, a temporary directory, no persistence.
type Server struct {
	Addr string
	cmd  *exec.Cmd
	dir  string
	done chan error
}

// StartServer starts redis-server on a free loopback port and waits until it
// answers PING.
func StartServer() (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNoServer
	}
	dir, err := os.MkdirTemp("", "dsbench-redis-")
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin,
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--protected-mode", "yes", "--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("resp: start redis-server: %w", err)
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, dir: dir, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := Dial(s.Addr, time.Second)
		if err == nil {
			rep, err := c.Do("PING")
			c.Close()
			if err == nil && rep.Str == "PONG" {
				return s, nil
			}
		}
		select {
		case err := <-s.done:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			os.RemoveAll(dir)
			return nil, fmt.Errorf("resp: redis-server exited: %v: %s", err, strings.TrimSpace(string(log)))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Close()
			return nil, fmt.Errorf("resp: redis-server on %s did not answer PING within 10s", s.Addr)
		}
	}
}

// Pid is the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Close stops the server (SIGTERM, then SIGKILL after 5s) and removes its
// directory.
func (s *Server) Close() error {
	defer os.RemoveAll(s.dir)
	if err := s.cmd.Process.Signal(os.Interrupt); err != nil {
		return nil // already gone
	}
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
	return nil
}

// UsedMemory reads used_memory from INFO memory: the bytes Redis allocated
// for its data.
func UsedMemory(c *Client) (int64, error) {
	rep, err := c.Do("INFO", "memory")
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(rep.Str, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("resp: INFO memory has no used_memory")
}
