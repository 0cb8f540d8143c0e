package maps

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/lmwarden/lmwarden/bpf"
	"github.com/lmwarden/lmwarden/internal/safefs"
)

// DefaultDir is where a warden pins its state.
const DefaultDir = "/sys/fs/bpf/lmwarden"

// Mode is which kernel datapath the state serves: the programs it loads
// and attaches besides the dispatcher.
type Mode string

const (
	// ModeMsg: sock_ops on the cgroup v2 root pairs the replicas' sockets,
	// sk_msg on them carries each response straight to the client socket.
	ModeMsg Mode = "msg"
	// ModeSkb: the sk_skb stream verdict carries bodies between sockets
	// the shim puts into lmw_socks.
	ModeSkb Mode = "skb"
)

// Options say where the state lives, which network namespace's sk_lookup
// hook the dispatcher attaches to, and which datapath's programs to run.
type Options struct {
	Dir   string // pinned state directory on bpffs; DefaultDir if empty
	NetNS string // a network namespace file; /proc/self/ns/net if empty
	Mode  Mode   // ModeSkb if empty
	// Cgroup is the cgroup v2 directory lmw_pair attaches to (ModeMsg);
	// the root of the first cgroup2 mount if empty (CgroupRoot).
	Cgroup string
	// LockTimeout bounds the wait for another warden's lock on the state
	// (DefaultLockTimeout if zero; negative: one try).
	LockTimeout time.Duration
}

func (o Options) lockTimeout() time.Duration {
	switch {
	case o.LockTimeout == 0:
		return DefaultLockTimeout
	case o.LockTimeout < 0:
		return 0
	}
	return o.LockTimeout
}

func (o Options) dir() string {
	if o.Dir == "" {
		return DefaultDir
	}
	return filepath.Clean(o.Dir)
}

func (o Options) netns() string {
	if o.NetNS == "" {
		return "/proc/self/ns/net"
	}
	return o.NetNS
}

func (o Options) mode() Mode {
	if o.Mode == "" {
		return ModeSkb
	}
	return o.Mode
}

// objects are the loaded maps (all of them, in either mode) and programs
// (the dispatcher and the mode's own; the others stay nil).
type objects struct {
	bpf.LmwardenMaps
	dispatch, verdict, pair, reply *ebpf.Program
}

func (o *objects) Close() {
	o.LmwardenMaps.Close()
	for _, p := range []*ebpf.Program{o.dispatch, o.verdict, o.pair, o.reply} {
		if p != nil {
			p.Close()
		}
	}
}

// State is a warden's handle on its pinned kernel state. Closing it leaves
// everything pinned and attached (traffic keeps flowing, and with the shim's
// listener gone sk_lookup fails open); Unload removes it.
type State struct {
	dir   string
	mode  Mode
	lock  *dirLock
	objs  objects
	links []link.Link
	// legacy: the links' pins whose programs were attached the older way
	// instead (attachSockmap), so nothing is pinned under those names.
	legacy []string
	// Reused is true when a previous warden's state was found and adopted.
	Reused bool
}

// Pin names of the links inside the state directory. The dispatcher's is
// pinned last when a state is created: its pin marks a complete state.
const (
	pinDispatchLink = "link_dispatch"
	pinVerdictLink  = "link_verdict"
	pinPairLink     = "link_pair"
	pinReplyLink    = "link_reply"
)

// modeLinks are the pins of each mode's own links.
var modeLinks = map[Mode][]string{ModeSkb: {pinVerdictLink}, ModeMsg: {pinPairLink, pinReplyLink}}

// Load adopts the state pinned at opts.Dir, or creates it atomically: the
// maps and links are pinned into a temporary directory next to it, the
// programs are attached, and only then is the directory renamed into
// place, so a reader never sees half a state. The returned State holds an
// exclusive lock on the directory until Close: a second warden waits for
// it up to opts.LockTimeout, then gets ErrLocked with the holder named. A
// state pinned for the other mode is switched to this one.
//
// The directory must be the warden's own (internal/safefs): owned by the
// effective uid, mode 0700, under directories nobody else can rename it
// out of; one another user made gets ErrUnsafe, and nothing is built in
// it. The shared parent is never locked (bpffs's root is mode 1777: any
// user may open and lock it).
func Load(opts Options) (*State, error) {
	dir := opts.dir()
	if m := opts.mode(); m != ModeSkb && m != ModeMsg {
		return nil, fmt.Errorf("maps: mode %q: want %q or %q", m, ModeMsg, ModeSkb)
	}
	if err := checkBPFFS(filepath.Dir(dir)); err != nil {
		return nil, err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("%w: memlock: %v", ErrUnsupported, err)
	}
	// Another warden (or an unload) may create or remove the directory
	// between one look and the next: look again, a few times.
	for try := 1; ; try++ {
		s, err := loadOnce(dir, opts)
		if !errors.Is(err, errRaced) || try == 4 {
			return s, err
		}
	}
}

// errRaced: the directory changed between the look and the lock.
var errRaced = errors.New("maps: the state directory changed while it was being opened")

func loadOnce(dir string, opts Options) (*State, error) {
	f, _, err := safefs.Dir(dir, false)
	if errors.Is(err, fs.ErrNotExist) {
		return create(dir, opts)
	}
	if err != nil {
		return nil, unsafeErr(err)
	}
	lock, err := lockOpen(f, opts.lockTimeout())
	if err != nil {
		f.Close()
		return nil, err
	}
	if !samePath(dir, f) {
		lock.unlock()
		return nil, errRaced
	}
	if _, err := os.Stat(filepath.Join(dir, pinDispatchLink)); err == nil {
		return adopt(dir, opts, lock)
	}
	// A directory without the last pin create writes: made empty for a
	// warden that runs unprivileged (it may not write the parent to
	// rename into place), or left by a crash mid-way. Build the state in
	// place under the directory's lock; pinned maps already there
	// (sessions) are reused.
	return createInPlace(dir, opts, lock)
}

// unsafeErr wraps a refusal of internal/safefs as ErrUnsafe.
func unsafeErr(err error) error {
	if errors.Is(err, safefs.ErrUnsafe) {
		return fmt.Errorf("%w: %v", ErrUnsafe, err)
	}
	return err
}

// samePath reports whether path still names the directory f is open on.
func samePath(path string, f *os.File) bool {
	var a, b unix.Stat_t
	if unix.Fstat(int(f.Fd()), &a) != nil || unix.Lstat(path, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

func createInPlace(dir string, opts Options, lock *dirLock) (_ *State, err error) {
	s := &State{dir: dir, mode: opts.mode(), lock: lock}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := s.loadObjects(dir); err != nil {
		return nil, err
	}
	if err := s.attach(dir, opts); err != nil {
		return nil, err
	}
	return s, chmodPins(dir)
}

func create(dir string, opts Options) (_ *State, err error) {
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+"_tmp_") // mode 0700
	if err != nil {
		return nil, err
	}
	s := &State{dir: dir, mode: opts.mode()}
	defer func() {
		if err != nil {
			s.closeObjects()
			s.lock.unlock()
			os.RemoveAll(tmp)
		}
	}()
	// The lock goes with the inode through the rename: no other warden
	// can take the state between the rename and this one's first use.
	f, _, err := safefs.Dir(tmp, false)
	if err != nil {
		return nil, unsafeErr(err)
	}
	if s.lock, err = lockOpen(f, 0); err != nil {
		f.Close()
		return nil, err
	}
	if err := s.loadObjects(tmp); err != nil {
		return nil, err
	}
	if err := s.attach(tmp, opts); err != nil {
		return nil, err
	}
	if err := chmodPins(tmp); err != nil {
		return nil, err
	}
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_NOREPLACE); err != nil {
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EPERM) {
			return nil, errRaced // another one made it meanwhile: adopt or refuse it
		}
		return nil, &os.PathError{Op: "rename", Path: tmp, Err: err}
	}
	return s, nil
}

// adopt reuses a previous warden's pinned maps (sessions included) and
// points its pinned links at freshly loaded programs; the links of the
// other mode, if that warden ran it, are detached.
func adopt(dir string, opts Options, lock *dirLock) (_ *State, err error) {
	s := &State{dir: dir, mode: opts.mode(), Reused: true, lock: lock}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := s.loadObjects(dir); err != nil {
		return nil, err
	}
	for mode, pins := range modeLinks {
		if mode != s.mode {
			for _, pin := range pins {
				if err := detachPinned(filepath.Join(dir, pin)); err != nil {
					return nil, fmt.Errorf("adopt %s: %w", dir, err)
				}
			}
		}
	}
	if err := s.attach(dir, opts); err != nil {
		return nil, fmt.Errorf("adopt %s: %w", dir, err)
	}
	return s, chmodPins(dir)
}

// attach attaches the programs and pins their links into dir, updating
// pinned links of a previous warden in place; the dispatcher's is last.
func (s *State) attach(dir string, opts Options) error {
	switch s.mode {
	case ModeSkb:
		if err := s.attachSockmap(dir, pinVerdictLink, s.objs.verdict, s.objs.LmwSocks, ebpf.AttachSkSKBStreamVerdict); err != nil {
			return err
		}
	case ModeMsg:
		cg := opts.Cgroup
		if cg == "" {
			var err error
			if cg, err = CgroupRoot(); err != nil {
				return err
			}
		}
		if err := s.attachOne(dir, pinPairLink, s.objs.pair, func() (link.Link, error) {
			return link.AttachCgroup(link.CgroupOptions{Path: cg, Attach: ebpf.AttachCGroupSockOps, Program: s.objs.pair})
		}); err != nil {
			return err
		}
		if err := s.attachSockmap(dir, pinReplyLink, s.objs.reply, s.objs.LmwReplicaSocks, ebpf.AttachSkMsgVerdict); err != nil {
			return err
		}
	}
	return s.attachOne(dir, pinDispatchLink, s.objs.dispatch, func() (link.Link, error) {
		ns, err := os.Open(opts.netns())
		if err != nil {
			return nil, err
		}
		defer ns.Close()
		return link.AttachNetNs(int(ns.Fd()), s.objs.dispatch)
	})
}

// attachOne points the link pinned at dir/pin at prog, or attaches prog
// anew and pins its link there.
func (s *State) attachOne(dir, pin string, prog *ebpf.Program, attach func() (link.Link, error)) error {
	path := filepath.Join(dir, pin)
	if l, err := link.LoadPinnedLink(path, nil); err == nil {
		if err := l.Update(prog); err != nil {
			l.Close()
			return fmt.Errorf("update %s: %w", pin, err)
		}
		s.links = append(s.links, l)
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("load %s: %w", pin, err)
	}
	l, err := attach()
	if err != nil {
		return fmt.Errorf("%w: attach %s: %v", ErrUnsupported, prog, err)
	}
	s.links = append(s.links, l)
	return l.Pin(path)
}

// attachSockmap attaches prog to the SOCKMAP or SOCKHASH m: with a
// bpf_link pinned at dir/pin where the kernel has links for that attach
// type (6.10 on), else with the older BPF_PROG_ATTACH (6.1 has no link
// for sk_msg or sk_skb: "create link: invalid argument"). Such an attach
// holds as long as the map lives, and the map is pinned: it survives the
// warden like a pinned link, the next warden's attach replaces the
// program in place, and unload, which unpins the map, ends it.
func (s *State) attachSockmap(dir, pin string, prog *ebpf.Program, m *ebpf.Map, typ ebpf.AttachType) error {
	err := s.attachOne(dir, pin, prog, func() (link.Link, error) {
		return link.AttachRawLink(link.RawLinkOptions{Target: m.FD(), Program: prog, Attach: typ})
	})
	if err == nil || !errors.Is(err, ErrUnsupported) {
		return err
	}
	if lerr := link.RawAttachProgram(link.RawAttachProgramOptions{Target: m.FD(), Program: prog, Attach: typ}); lerr != nil {
		return fmt.Errorf("%w; the older attach (BPF_PROG_ATTACH): %v", err, lerr)
	}
	s.legacy = append(s.legacy, pin)
	return nil
}

// OlderAttach names the programs attached with BPF_PROG_ATTACH because
// this kernel has no bpf_link for their attach type (their pins, e.g.
// link_reply, are absent).
func (s *State) OlderAttach() []string { return s.legacy }

// detachPinned detaches and removes the link pinned at path, if any.
func detachPinned(path string) error {
	l, err := link.LoadPinnedLink(path, nil)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer l.Close()
	if err := l.Detach(); err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("detach %s: %w", filepath.Base(path), err)
	}
	return l.Unpin()
}

func checkBPFFS(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrUnsupported, dir, err)
	}
	if st.Type != unix.BPF_FS_MAGIC {
		return fmt.Errorf("%w: %s is not a bpffs mount (mount -t bpf bpf /sys/fs/bpf)", ErrUnsupported, dir)
	}
	return nil
}

func loadSpec() (*ebpf.CollectionSpec, error) {
	spec, err := bpf.LoadLmwarden()
	if err != nil {
		return nil, err
	}
	for _, m := range spec.Maps {
		if m.Name == ".rodata" || m.Name == ".bss" || m.Name == ".data" {
			continue
		}
		m.Pinning = ebpf.PinByName
	}
	return spec, nil
}

// loadObjects loads every map (pinned by name into pinDir, or the pinned
// ones reused) and the programs of s.mode: a kernel that cannot verify the
// other mode's programs still runs this one.
func (s *State) loadObjects(pinDir string) error {
	spec, err := loadSpec()
	if err != nil {
		return err
	}
	opts := &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: pinDir}}
	switch s.mode {
	case ModeMsg:
		var o struct {
			bpf.LmwardenMaps
			Dispatch *ebpf.Program `ebpf:"lmw_dispatch"`
			Pair     *ebpf.Program `ebpf:"lmw_pair"`
			Reply    *ebpf.Program `ebpf:"lmw_reply"`
		}
		err = spec.LoadAndAssign(&o, opts)
		s.objs = objects{LmwardenMaps: o.LmwardenMaps, dispatch: o.Dispatch, pair: o.Pair, reply: o.Reply}
	default:
		var o struct {
			bpf.LmwardenMaps
			Dispatch *ebpf.Program `ebpf:"lmw_dispatch"`
			Verdict  *ebpf.Program `ebpf:"lmw_verdict"`
		}
		err = spec.LoadAndAssign(&o, opts)
		s.objs = objects{LmwardenMaps: o.LmwardenMaps, dispatch: o.Dispatch, verdict: o.Verdict}
	}
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return fmt.Errorf("%w: verifier: %+v", ErrUnsupported, ve)
		}
		return fmt.Errorf("%w: load: %v", ErrUnsupported, err)
	}
	return nil
}

func chmodPins(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.Chmod(filepath.Join(dir, e.Name()), 0o600); err != nil {
			return err
		}
	}
	return os.Chmod(dir, 0o700)
}

// Dir is the pinned state directory.
func (s *State) Dir() string { return s.dir }

// Mode is the datapath whose programs run.
func (s *State) Mode() Mode { return s.mode }

func (s *State) closeObjects() {
	for _, l := range s.links {
		l.Close()
	}
	s.links = nil
	s.objs.Close()
}

// Close releases this process's handles and the lock. The pinned state
// stays: a restarted warden adopts it with Load.
func (s *State) Close() error {
	s.closeObjects()
	s.lock.unlock()
	return nil
}
