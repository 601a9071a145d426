package xdpprog

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
)

// childEnv makes the test binary a process that attaches the program and
// waits to be killed: "<netns name> <ifindex>".
const childEnv = "XDPPROG_TEST_CHILD"

func attachedChild(spec string) int {
	var name string
	var ifindex int
	if _, err := fmt.Sscanf(spec, "%s %d", &name, &ifindex); err != nil {
		fmt.Println("bad spec:", err)
		return 2
	}
	runtime.LockOSThread() // stays in the namespace; the process never leaves it
	ns, err := netns.GetFromName(name)
	if err == nil {
		err = netns.Set(ns)
	}
	if err != nil {
		fmt.Println("netns:", err)
		return 2
	}
	o, err := Load(1)
	if err != nil {
		fmt.Println(err)
		return 2
	}
	if _, _, err := o.Attach(ifindex, ModeNative); err != nil {
		fmt.Println(err)
		return 2
	}
	fmt.Println("attached")
	select {} // until killed
}

// TestAttach_KilledProcessDetaches attaches from a child process, kills it
// with SIGKILL and checks that the kernel removed the program: no exit path
// of xlb leaves the interface with our program on it.
func TestAttach_KilledProcessDetaches(t *testing.T) {
	ns := newTestNS(t, 1)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d", childEnv, ns.Name, ns.In.Attrs().Index))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "attached" {
		t.Fatalf("child: %q, %v", line, err)
	}
	if x := ns.xdpState(t, ns.In); !x.Attached {
		t.Fatal("netlink shows no program while the child runs")
	}
	cmd.Process.Kill()
	cmd.Wait()
	killed = true
	if x := ns.xdpState(t, ns.In); x.Attached {
		t.Errorf("program %d still attached after the process was killed", x.ProgId)
	}
}
