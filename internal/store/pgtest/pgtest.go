// Package pgtest gives tests a throwaway PostgreSQL: one cluster per test
// binary, initdb'd into a temporary directory and started on a free port
// with its own socket directory (never 5432), and a fresh database per
// test. When GPUFLEET_TEST_POSTGRES names a server (a postgres:// URL of a
// role that may CREATE DATABASE) it is used instead.
//
// The binaries come from /usr/lib/postgresql/*/bin (the newest) or PATH.
// initdb refuses to run as root, so as root the cluster runs as the
// postgres user (runuser -u postgres for initdb, the process credential
// for the server). When no PostgreSQL can be started the tests that need
// it skip, except under CI=true, where they fail.
//
// A test binary wires it in with
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// and each test calls pgtest.Database(t).
package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// Server is a PostgreSQL server for tests.
type Server struct {
	// Host and Port are its TCP address.
	Host string
	Port int
	// admin is the URL of its "postgres" database.
	admin    string
	external bool

	dir, data, sock, bin, logPath string
	cred                          *syscall.Credential
	uid, gid                      int

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	bouncer string // host:port of pgbouncer, once started

	n atomic.Int64
}

var (
	once     sync.Once
	shared   *Server
	startErr error
	cleanups []func()
	cleanMu  sync.Mutex
)

// Main runs the test binary's tests and stops the shared server (and any
// pgbouncer) afterwards.
func Main(m *testing.M) {
	code := m.Run()
	cleanMu.Lock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	cleanMu.Unlock()
	if shared != nil {
		shared.Stop()
	}
	os.Exit(code)
}

// AtExit runs f when Main returns, after the tests (and before the
// servers stop): for what a test binary sets up for all its tests.
func AtExit(f func()) {
	cleanMu.Lock()
	cleanups = append(cleanups, f)
	cleanMu.Unlock()
}

// Shared returns the test binary's server, starting it on first use. It
// skips the test when PostgreSQL cannot be started, or fails it under
// CI=true.
func Shared(t testing.TB) *Server {
	t.Helper()
	once.Do(func() { shared, startErr = Start() })
	if startErr != nil {
		if os.Getenv("CI") == "true" || os.Getenv("GPUFLEET_TEST_POSTGRES") != "" {
			t.Fatalf("PostgreSQL is required: %v", startErr)
		}
		t.Skipf("no PostgreSQL: %v (install postgresql, or set GPUFLEET_TEST_POSTGRES)", startErr)
	}
	return shared
}

// Database creates a fresh database on the shared server and returns its
// URL.
func Database(t testing.TB) string {
	t.Helper()
	return Shared(t).NewDatabase(t)
}

// Start starts a throwaway server, or connects to GPUFLEET_TEST_POSTGRES.
func Start() (*Server, error) {
	if dsn := os.Getenv("GPUFLEET_TEST_POSTGRES"); dsn != "" {
		u, err := url.Parse(dsn)
		if err != nil {
			return nil, fmt.Errorf("GPUFLEET_TEST_POSTGRES: %w", err)
		}
		port, _ := strconv.Atoi(u.Port())
		if port == 0 {
			port = 5432
		}
		s := &Server{Host: u.Hostname(), Port: port, admin: dsn, external: true}
		if err := s.waitReady(10 * time.Second); err != nil {
			return nil, err
		}
		return s, nil
	}
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "gpufleet-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{Host: "127.0.0.1", dir: dir, data: filepath.Join(dir, "data"), sock: filepath.Join(dir, "sock"),
		bin: bin, logPath: filepath.Join(dir, "postgres.log"), uid: -1, gid: -1}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root needs a postgres user: %w", err)
		}
		s.uid, _ = strconv.Atoi(u.Uid)
		s.gid, _ = strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(s.uid), Gid: uint32(s.gid)}
		if err := os.Chown(dir, s.uid, s.gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	if err := os.Mkdir(s.sock, 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s.chown(s.sock)
	initdb := []string{filepath.Join(bin, "initdb"), "-D", s.data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"}
	var cmd *exec.Cmd
	if s.cred != nil {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--"}, initdb...)...)
	} else {
		cmd = exec.Command(initdb[0], initdb[1:]...)
	}
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	var lastErr error
	for range 3 {
		s.Port = freePort()
		if lastErr = s.startProcess(); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		log, _ := os.ReadFile(s.logPath)
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w\n%s", lastErr, log)
	}
	s.admin = s.URL("postgres")
	return s, nil
}

// findBin finds the directory of initdb and postgres.
func findBin() (string, error) {
	if d := os.Getenv("GPUFLEET_TEST_PG_BIN"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("no PostgreSQL binaries in /usr/lib/postgresql/*/bin or PATH")
}

func (s *Server) chown(path string) {
	if s.uid >= 0 {
		os.Chown(path, s.uid, s.gid)
	}
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startProcess runs postgres on s.Port and waits until it accepts
// connections. Durability is off: the cluster is thrown away.
func (s *Server) startProcess() error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), "-D", s.data, "-p", strconv.Itoa(s.Port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+s.sock,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=400", "-c", "shared_buffers=128MB", "-c", "log_min_messages=warning")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start postgres: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	s.admin = s.URL("postgres")
	if err := s.waitReady(30 * time.Second); err != nil {
		s.kill(syscall.SIGKILL)
		return err
	}
	return nil
}

func (s *Server) waitReady(d time.Duration) error {
	deadline := time.Now().Add(d)
	var err error
	for time.Now().Before(deadline) {
		if s.done != nil {
			select {
			case <-s.done:
				return errors.New("postgres exited")
			default:
			}
		}
		var db *sql.DB
		db, err = sql.Open("pgx", s.admin)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err = db.PingContext(ctx)
			cancel()
			db.Close()
			if err == nil {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("postgres not ready after %s: %v", d, err)
}

// kill signals the postmaster and waits for it to exit.
func (s *Server) kill(sig syscall.Signal) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// URL is the URL of database db.
func (s *Server) URL(db string) string {
	if s.external {
		u, _ := url.Parse(s.admin)
		u.Path = "/" + db
		return u.String()
	}
	return fmt.Sprintf("postgres://postgres@%s:%d/%s?sslmode=disable", s.Host, s.Port, db)
}

// NewDatabase creates an empty database and returns its URL. On an
// external server it is dropped when the test ends.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("gpufleet_test_%d_%d", os.Getpid(), s.n.Add(1))
	db, err := sql.Open("pgx", s.admin)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(context.Background(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	if s.external {
		t.Cleanup(func() {
			db, err := sql.Open("pgx", s.admin)
			if err == nil {
				db.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
				db.Close()
			}
		})
	}
	return s.URL(name)
}

// Exec runs a statement in database db (as the admin role).
func (s *Server) Exec(dsn, query string, args ...any) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.Exec(query, args...)
	return err
}

// Restart stops the server the hard way (immediate shutdown: every
// session is cut, crash recovery on start), waits down for d and starts it
// again on the same port. External servers cannot be restarted.
func (s *Server) Restart(d time.Duration) error {
	if s.external {
		return errors.New("cannot restart an external server")
	}
	s.kill(syscall.SIGQUIT)
	time.Sleep(d)
	return s.startProcess()
}

// External reports whether the server is GPUFLEET_TEST_POSTGRES's.
func (s *Server) External() bool { return s.external }

// Stop shuts the throwaway server down and removes its files.
func (s *Server) Stop() {
	if s.external {
		return
	}
	s.kill(syscall.SIGINT)
	os.RemoveAll(s.dir)
}

// Bouncer returns dsn (a database of s) rewritten to go through a
// throwaway pgbouncer in transaction mode, started on first use and
// stopped when the test binary ends. It skips (fails under CI=true) when
// pgbouncer is not installed.
func (s *Server) Bouncer(t testing.TB, dsn string) string {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bouncer == "" {
		s.bouncer = s.startBouncer(t)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = s.bouncer
	return u.String()
}

func (s *Server) startBouncer(t testing.TB) string {
	t.Helper()
	db := "postgres"
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"} {
			if _, e := os.Stat(p); e == nil {
				bin, err = p, nil
				break
			}
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("pgbouncer is required: apt-get install -y pgbouncer")
		}
		t.Skip("no pgbouncer (apt-get install -y pgbouncer)")
	}
	dir, err := os.MkdirTemp("", "gpufleet-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	s.chown(dir)
	port := freePort()
	user := "postgres"
	if s.external {
		u, _ := url.Parse(s.admin)
		user = u.User.Username()
	}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 20
ignore_startup_parameters = extra_float_digits
server_reset_query =
logfile = %s
pidfile = %s
`, s.Host, s.Port, port, filepath.Join(dir, "users.txt"), filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
	for name, body := range map[string]string{"pgbouncer.ini": ini, "users.txt": fmt.Sprintf("%q \"\"\n", user)} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		s.chown(p)
	}
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Setpgid: true}
	out, _ := os.Create(filepath.Join(dir, "stdout.log"))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); out.Close(); close(done) }()
	stop := func() {
		cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		os.RemoveAll(dir)
	}
	cleanMu.Lock()
	cleanups = append(cleanups, stop)
	cleanMu.Unlock()
	u := fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", user, port, db)
	deadline := time.Now().Add(10 * time.Second)
	for {
		b := &Server{admin: u}
		if err := b.waitReady(time.Second); err == nil {
			return fmt.Sprintf("127.0.0.1:%d", port)
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			so, _ := os.ReadFile(filepath.Join(dir, "stdout.log"))
			t.Fatalf("pgbouncer exited:\n%s\n%s", log, so)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("pgbouncer not ready after 10s")
		}
	}
}

// DBName is the database name in a URL.
func DBName(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(u.Path, "/")
}
