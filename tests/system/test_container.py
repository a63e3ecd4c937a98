#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""system tier: llmprofd as deploy/kubernetes/llmprofd.yaml runs it, from the image
deploy/Containerfile makes, in the host's PID namespace.

No Kubernetes or container runtime runs here; what they would do is done by hand, from the
manifest itself (its command, arguments, capabilities, mounts, port and resources):

- the image: deploy/mkrootfs.sh's root filesystem (the system tier's, cached) with the .deb
  installed and packed as the tarball the Containerfile adds to an empty image, unpacked;
- the pod: that root (read-only, readOnlyRootFilesystem) with a fresh /proc of the host's
  PID namespace (hostPID), sysfs and the cgroup hierarchies read-only, and each volumeMount (hostPath volumes on directories of
  the test's, not the host's /run/llmprofd and /var/lib/llmprofd, which a user's llmprofd
  may hold; the Secret from a web configuration with a user of the test's), in a network
  namespace of its own (the pod's: the manifest's port 9713 clashes with nothing), with the
  container's capabilities as its bounding set and no new privileges;
- then what the fleet sees: engines on the host and in another container (its own root,
  where its binary and model have paths the host and the daemon's root lack) tracked by
  their host pids with their threads, tokens, ops and model; llmprofctl on the node
  through the hostPath socket; /metrics and the pprof profile on the pod's port behind the
  web configuration's credentials; its memory within the manifest's request; SIGTERM
  saving the totals to the hostPath state directory.

One argument is the test's: --discover-cgroup, so that it discovers its own engines only,
not those a busy host runs beside the suite."""
import gzip
import os
import re
import signal
import subprocess
import sys

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import lptest as t  # noqa: E402
import machine  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
MANIFEST = os.path.join(ROOT, "deploy", "kubernetes", "llmprofd.yaml")
WORKLOAD = os.path.join(ROOT, "tests", "workload")
UNIT = os.path.join(ROOT, "systemd", "llmprofd.service.in")


def daemonset():
    docs = list(yaml.safe_load_all(open(MANIFEST)))
    ds = [d for d in docs if d and d["kind"] == "DaemonSet"][0]
    pod = ds["spec"]["template"]
    return pod, pod["spec"]["containers"][0]


def mebibytes(q):
    """A Kubernetes memory quantity (Mi, Gi, or bytes) in MiB."""
    m = re.fullmatch(r"(\d+)(Mi|Gi)?", q)
    return int(m[1]) * {"Mi": 1, "Gi": 1024, None: 1 / 1048576}[m[2]]


def check_manifest(pod, c):
    spec = pod["spec"]
    with open(UNIT) as f:
        caps = re.search(r"^CapabilityBoundingSet=(.*)$", f.read(), re.M)[1].split()
    sc = c["securityContext"]
    t.check(spec.get("hostPID") is True and not spec.get("hostNetwork") and
            sorted("CAP_" + x for x in sc["capabilities"]["add"]) == sorted(caps) and
            sc["capabilities"]["drop"] == ["ALL"] and sc.get("privileged") is False and
            sc.get("allowPrivilegeEscalation") is False,
            "the DaemonSet: hostPID, the unit's capabilities %s and no others, unprivileged"
            % sc["capabilities"]["add"])
    port = [p["containerPort"] for p in c["ports"] if p["name"] == "metrics"][0]
    ann = pod["metadata"]["annotations"]
    addr = [a.split("=", 1)[1] for a in c["args"] if a.startswith("--metrics-address=")]
    t.check(addr == ["0.0.0.0:%d" % port] and ann["prometheus.io/port"] == str(port) and
            ann["prometheus.io/scrape"] == "true" and ann["parca.dev/port"] == str(port),
            "its port %d is the one it listens on and the one its Prometheus and Parca "
            "annotations name" % port)
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    sock = [a.split("=", 1)[1] for a in c["args"] if a.startswith("--socket=")][0]
    state = [a.split("=", 1)[1] for a in c["args"] if a.startswith("--state-directory=")][0]
    t.check({"/sys/kernel/btf", os.path.dirname(sock), state} <= mounts,
            "BTF, the socket's directory and the state directory are mounted: %s"
            % sorted(mounts))
    return port


def image(work, deb, rootfs):
    """The image's root filesystem: mkrootfs.sh --deb --tar on an overlay of the cached
    root filesystem (which stays as it is), and the tarball unpacked as FROM scratch + ADD
    would."""
    for d in ("upper", "work", "build", "root"):
        os.mkdir(os.path.join(work, d))
    tar = os.path.join(work, "llmprofd-rootfs.tar")
    script = ("mount -t overlay overlay -o lowerdir={rootfs},upperdir={w}/upper,"
              "workdir={w}/work {w}/build && {mk} --deb {deb} --tar {tar} {w}/build").format(
        rootfs=rootfs, w=work, mk=os.path.join(ROOT, "deploy", "mkrootfs.sh"), deb=deb,
        tar=tar)
    p = subprocess.run(["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                        script], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise AssertionError("mkrootfs.sh --deb --tar failed: %s" % p.stderr[-2000:])
    t.check(True, "mkrootfs.sh --deb --tar made the image's tarball (%d MiB)"
            % (os.path.getsize(tar) >> 20))
    subprocess.run(["tar", "--numeric-owner", "-xf", tar, "-C", os.path.join(work, "root")],
                   check=True, timeout=300)
    os.unlink(tar)
    return os.path.join(work, "root")


def pod_script(root, c, pod, work, extra):
    """The shell commands that make the pod's mounts and exec its container."""
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    lines = ["set -e", "ip link set lo up", "mount --bind {r} {r}".format(r=root),
             "mount -t proc proc {r}/proc".format(r=root),
             "mount -t sysfs -o ro sysfs {r}/sys".format(r=root),
             # The cgroup hierarchies, read-only, as runtimes give a container.
             "mount --rbind /sys/fs/cgroup {r}/sys/fs/cgroup".format(r=root),
             "mount -o remount,bind,ro {r}/sys/fs/cgroup".format(r=root),
             "mount --rbind /dev {r}/dev".format(r=root)]
    for m in c["volumeMounts"]:
        v = vols[m["name"]]
        if "hostPath" in v:
            host = v["hostPath"]["path"]
            # The node's /sys/kernel/*, as they are; the rest on the test's directories.
            src = host if host.startswith("/sys/") else os.path.join(work, "node" + host)
            if not host.startswith("/sys/"):
                os.makedirs(src, exist_ok=True)
        else:
            src = os.path.join(work, "volumes", m["name"])
            os.makedirs(src, exist_ok=True)
        dst = root + m["mountPath"]
        lines.append("mkdir -p %s 2>/dev/null || true" % dst)
        lines.append("mount --bind %s %s" % (src, dst))
        if m.get("readOnly"):
            lines.append("mount -o remount,bind,ro %s" % dst)
    if c["securityContext"].get("readOnlyRootFilesystem"):
        lines.append("mount -o remount,bind,ro %s" % root)
    caps = ",".join("+" + x.lower() for x in c["securityContext"]["capabilities"]["add"])
    argv = c["command"] + c["args"] + extra
    lines += pivot(root)
    lines.append("exec setpriv --bounding-set=-all,%s --inh-caps=-all --no-new-privs -- %s"
                 % (caps, " ".join("'%s'" % a for a in argv)))
    return "\n".join(lines)


def pivot(root):
    """Into root as a runtime goes into a container's: pivot_root, then the old root
    detached, so that nothing of the host's tree is reachable from there and the kernel
    names others' files (in /proc/PID/maps and exe) by their paths in their own mount
    namespace, as it does for a real container's processes. Not chroot: the host's tree
    stays reachable and those paths are the host's."""
    return ["cd %s" % root, "pivot_root . mnt", "cd /", "umount -l /mnt"]


def main():
    why = machine.missing_tools()
    if why:
        t.check(False, "the system tier can run: " + why)
        return
    pod, c = daemonset()
    port = check_manifest(pod, c)
    work = t.tmpdir("llmprof-container-")
    os.chmod(work, 0o755)
    pkg = os.path.join(work, "pkg")
    os.mkdir(pkg)
    deb = machine.package(pkg)
    rootfs = machine.rootfs()
    root = image(work, deb, rootfs)
    t.check(os.access(root + "/usr/sbin/llmprofd", os.X_OK) and
            os.path.exists(root + "/lib/systemd/system/llmprofd.service"),
            "the image holds the package")

    # The Secret: a web configuration with a user of the test's.
    secret = os.path.join(work, "volumes", "web-config")
    os.makedirs(secret)
    with open(os.path.join(secret, "web-config.yml"), "w") as f:
        f.write("basic_auth_users:\n  scraper: %s\n" % t.bcrypt("sekrit"))
    scope = t.scope()
    extra = ["--discover-cgroup=" + scope.name] if scope else []
    script = pod_script(root, c, pod, work, extra)
    log = open(os.path.join(work, "pod.log"), "w")
    # --kill-child: whatever ends the runner (the harness at a failure) ends the pod.
    runner = subprocess.Popen(["unshare", "--mount", "--net", "--propagation", "private",
                               "--fork", "--kill-child", "--", "bash", "-c", script], stdout=log,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    t._children.append(runner)
    daemon = t.child_of(runner.pid)

    def pod_log():
        with open(log.name, errors="replace") as f:
            return f.read()
    sock = os.path.join(work, "node", "run", "llmprofd", "llmprofd.sock")
    t.poll("the daemon's socket on the node", lambda: "ready:" in pod_log() or
           runner.poll() is not None, timeout=120, interval=0.2)
    t.check(runner.poll() is None, "the pod's daemon is up: %s" % pod_log()[-1500:])
    with open("/proc/%d/status" % daemon) as f:
        st = dict(x.split(":", 1) for x in f.read().splitlines() if ":" in x)
    t.check(st["NoNewPrivs"].strip() == "1" and
            int(st["CapBnd"], 16) == int(st["CapEff"], 16) and
            bin(int(st["CapBnd"], 16)).count("1") == len(c["securityContext"]["capabilities"]
                                                          ["add"]),
            "it runs with the container's capabilities (%s) and no new privileges"
            % st["CapBnd"].strip())
    status = t.curl(sock, "GET", "/v1/status")[1]
    t.check(status["pid_namespace"]["host"] is True,
            "it sees the host's PID namespace: %s" % status["pid_namespace"])

    # Engines: one on the host, one in another container's root.
    model_dir = os.path.join(work, "models")
    os.mkdir(model_dir)
    model = os.path.join(model_dir, "small.gguf")
    subprocess.run([sys.executable, os.path.join(WORKLOAD, "gen_gguf.py"), "--shape", "small",
                    model], check=True, timeout=120)
    simple = t.llama_simple()
    host = subprocess.Popen([simple, "-m", model, "-n", "30000", "Once upon a time"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t._children.append(host)
    other = os.path.join(work, "other")
    for d in ("upper", "work", "root"):
        os.makedirs(os.path.join(other, d))
    eng = ("mount -t overlay overlay -o lowerdir={rootfs},upperdir={o}/upper,workdir={o}/work "
           "{o}/root && mount --bind {o}/root {o}/root && mkdir -p {o}/root/opt/llama {o}/root/srv/models && "
           "touch {o}/root/opt/llama/llama-simple && "
           "mount --bind {simple} {o}/root/opt/llama/llama-simple && "
           "mount --bind {models} {o}/root/srv/models && mount -t proc proc {o}/root/proc && "
           "{pivot} && exec /opt/llama/llama-simple -m /srv/models/small.gguf -n 30000 "
           "'Once upon a time'").format(rootfs=rootfs, o=other, simple=simple, models=model_dir,
                                        pivot=" && ".join(pivot(os.path.join(other, "root"))))
    contained = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "--fork",
                                  "--kill-child", "--", "sh", "-c", eng],
                                 stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
    t._children.append(contained)
    cpid = t.child_of(contained.pid)

    def tracked(pid, what):
        def full():
            status, doc, _ = t.curl(sock, "GET", "/v1/processes/%d" % pid)
            if status != 200 or not doc.get("ggml"):
                return None
            tids = set(int(x) for x in os.listdir("/proc/%d/task" % pid))
            ours = set(th["tid"] for th in doc.get("threads") or [])
            return (ours == tids and doc["counters"].get("decode_generation_tokens", 0) > 0
                    and doc["ggml"].get("ops") and doc.get("model") and doc)
        doc = t.poll("%s (pid %d) tracked" % (what, pid), full, timeout=120, interval=0.5)
        t.check(True, "%s, pid %d: %s, %d threads, %d generation tokens, ops %s, model %s"
                % (what, pid, doc["exe"], len(doc["threads"]),
                   doc["counters"]["decode_generation_tokens"],
                   [o["op"] for o in doc["ggml"]["ops"][:3]], doc["model"]["path"]))
        return doc
    tracked(host.pid, "an engine on the host")
    doc = tracked(cpid, "an engine in another container")
    t.check(doc["exe"] == "/opt/llama/llama-simple" and
            doc["model"]["path"] == "/srv/models/small.gguf" and
            not os.path.exists("/opt/llama/llama-simple"),
            "its binary and model by their paths in its own root, which neither the host "
            "nor the daemon's root has")

    # llmprofctl on the node, through the hostPath socket.
    p = subprocess.run([os.environ["LLMPROFCTL"], "--socket", sock, "top", "-b", "-n", "1"],
                       capture_output=True, text=True, timeout=30)
    t.check(p.returncode == 0 and re.search(r"^\s*%d\s" % host.pid, p.stdout, re.M) and
            re.search(r"^\s*%d\s" % cpid, p.stdout, re.M),
            "llmprofctl --socket (the hostPath) top lists both: %s" % p.stdout[-400:])

    # The pod's port, as Prometheus and Parca reach it: only with the Secret's credentials.
    def scrape(path, user=None, timeout=30):
        cmd = ["nsenter", "--net=/proc/%d/ns/net" % daemon, "curl", "-s", "-o", "-", "-w",
               "\n%{http_code}", "--max-time", str(timeout)]
        if user:
            cmd += ["-u", user]
        p = subprocess.run(cmd + ["http://127.0.0.1:%d%s" % (port, path)],
                           capture_output=True, timeout=timeout + 10)
        body, _, code = p.stdout.rpartition(b"\n")
        return int(code or 0), body
    code, _ = scrape("/metrics")
    code_ok, body = scrape("/metrics", user="scraper:sekrit")
    text = body.decode(errors="replace")
    t.check(code == 401 and code_ok == 200 and 'pid="%d"' % host.pid in text and
            'pid="%d"' % cpid in text,
            "/metrics on port %d: 401 without credentials, the two engines' series with "
            "them" % port)
    code, body = scrape("/debug/pprof/profile?seconds=2", user="scraper:sekrit")
    prof = gzip.decompress(body) if code == 200 and body[:2] == b"\x1f\x8b" else b""
    t.check(code == 200 and b"llama-simple" in prof,
            "the pprof profile of 2 s on that port: %d bytes of gzip, naming the engines"
            % len(body))

    # Memory against the manifest's request: resident at its peak, and the BPF maps,
    # which the pod's memory cgroup is charged too.
    with open("/proc/%d/status" % daemon) as f:
        hwm = int(re.search(r"^VmHWM:\s+(\d+) kB", f.read(), re.M)[1]) / 1024
    status = t.curl(sock, "GET", "/v1/status")[1]
    kernel = status["kernel_memory_bytes"] / 1048576
    req = mebibytes(c["resources"]["requests"]["memory"])
    lim = mebibytes(c["resources"]["limits"]["memory"])
    t.check(hwm + kernel <= req <= lim,
            "memory: %.1f MiB resident at its peak + %.1f MiB of BPF maps, within the "
            "request of %d MiB (limit %d)" % (hwm, kernel, req, lim))

    host.kill()
    contained.kill()  # and, by --kill-child, the engine
    t.poll("the contained engine's end", lambda: not os.path.exists("/proc/%d" % cpid),
           timeout=20)
    state = os.path.join(work, "node", "var", "lib", "llmprofd", "state.json")
    os.kill(daemon, signal.SIGTERM)
    t.check(runner.wait(timeout=30) == 0 and os.path.exists(state),
            "SIGTERM: it exits 0, its totals saved on the node's hostPath (%s)"
            % os.path.relpath(state, work))


t.run(main, timeout=900)
