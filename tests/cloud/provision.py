"""Set-up steps of tests/cloud/up that talk to the running services.

  provision.py ping                  exit 0 if Keystone issues an admin token
  provision.py wait-http URL PROC    wait until URL answers (PROC must stay alive)
  provision.py identity              projects, users, roles, service catalog
  provision.py resources             AZs, external network, flavors, images,
                                     application credential, clouds.yaml
  provision.py check-listeners       fail if a started process listens beyond 127.0.0.1
  provision.py scrub                 delete what earlier test runs left in any project
                                     (servers, load balancers, floating IPs, routers,
                                     ports, networks, security groups, volumes, server
                                     groups); keeps what `resources` made

Every step is idempotent (get or create).
"""
import json
import os
import sys
import time
import urllib.error
import urllib.request

import yaml

from cloudapi import AUTH_URL, PORTS, PW, REGION, STATE, ApiError, Client, wait_for

WITH_CINDER = os.environ.get("STACKHOOK_CLOUD_CINDER", "1") == "1"
MEMBER_PROJECT = "stackhook"
MEMBER_USER = "stackhook"
SERVICE_USERS = ["nova", "placement", "neutron", "octavia", "glance", "cinder"]
LB_ROLES = ["load-balancer_member", "load-balancer_admin", "load-balancer_observer",
            "load-balancer_global_observer"]
AZS = {"az1": "compute1", "az2": "compute2"}
FLAVORS = [("m1.tiny", 1, 512, 1), ("m1.small", 1, 2048, 20),
           ("m1.medium", 2, 4096, 40), ("m1.large", 4, 8192, 80)]
IMAGES = [("ubuntu-2404-kube-v1.33.1", "v1.33.1"), ("ubuntu-2404-kube-v1.34.1", "v1.34.1")]
# The external network's addresses exist only in Neutron's database; nothing
# routes them. 203.0.113.0/24 is TEST-NET-3 (RFC 5737), never a real host.
PUBLIC_CIDR = "203.0.113.0/24"


def log(*a):
    print("[provision %s]" % time.strftime("%H:%M:%S"), *a, flush=True)


def proc_alive(name):
    try:
        pid, start = open(os.path.join(STATE, "pids", name)).read().split()
        stat = open("/proc/%s/stat" % pid).read()
    except (OSError, ValueError):
        return False
    return stat.rsplit(") ", 1)[1].split()[19] == start


def wait_http(url, proc, timeout=600):
    end = time.time() + timeout
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    while time.time() < end:
        try:
            opener.open(url, timeout=5)
            return 0
        except urllib.error.HTTPError as e:
            if e.code < 500:
                return 0
        except OSError:
            pass
        if not proc_alive(proc):
            print("%s exited before answering %s" % (proc, url), file=sys.stderr)
            return 1
        time.sleep(0.5)
    print("timed out waiting for %s" % url, file=sys.stderr)
    return 1


# ---------------------------------------------------------------- identity
def find(items, name):
    for x in items:
        if x.get("name") == name:
            return x
    return None


def ensure(c, coll, key, name, body):
    found = find(c.get("identity", "/%s?name=%s" % (coll, name))[coll], name)
    if found:
        return found
    log("create", key, name)
    return c.post("identity", "/" + coll, {key: dict(body, name=name)})[key]


def grant(c, project, user, role):
    c.put("identity", "/projects/%s/users/%s/roles/%s" % (project["id"], user["id"], role["id"]))


def identity():
    c = Client.admin()
    dom = "default"
    roles = {r: ensure(c, "roles", "role", r, {})
             for r in ["admin", "member", "reader", "service"] + LB_ROLES}
    service = ensure(c, "projects", "project", "service",
                     {"domain_id": dom, "description": "service users"})
    member_project = ensure(c, "projects", "project", MEMBER_PROJECT,
                            {"domain_id": dom, "description": "non-admin project for tests"})
    for name in SERVICE_USERS:
        u = ensure(c, "users", "user", name, {"domain_id": dom, "password": PW})
        grant(c, service, u, roles["admin"])
        grant(c, service, u, roles["service"])
    m = ensure(c, "users", "user", MEMBER_USER,
               {"domain_id": dom, "password": PW, "default_project_id": member_project["id"]})
    grant(c, member_project, m, roles["member"])
    grant(c, member_project, m, roles["load-balancer_member"])

    svcs = [("nova", "compute", "http://127.0.0.1:%d/v2.1" % PORTS["compute"]),
            ("placement", "placement", "http://127.0.0.1:%d" % PORTS["placement"]),
            ("neutron", "network", "http://127.0.0.1:%d" % PORTS["network"]),
            ("octavia", "load-balancer", "http://127.0.0.1:%d" % PORTS["load-balancer"]),
            ("glance", "image", "http://127.0.0.1:%d" % PORTS["image"]),
            ("cinderv3", "volumev3", "http://127.0.0.1:%d/v3/%%(project_id)s" % PORTS["volumev3"])]
    existing = {s["type"]: s for s in c.get("identity", "/services")["services"]}
    for name, typ, url in svcs:
        s = existing.get(typ)
        if not s:
            log("create service", typ)
            s = c.post("identity", "/services",
                       {"service": {"name": name, "type": typ, "enabled": True}})["service"]
        have = {e["interface"]
                for e in c.get("identity", "/endpoints?service_id=%s" % s["id"])["endpoints"]}
        for iface in ("public", "internal", "admin"):
            if iface not in have:
                c.post("identity", "/endpoints", {"endpoint": {
                    "service_id": s["id"], "interface": iface, "url": url, "region_id": REGION}})
    log("identity done")


# ---------------------------------------------------------------- resources
def compute_hosts(c):
    svcs = c.get("compute", "/os-services?binary=nova-compute")["services"]
    up = {s["host"] for s in svcs if s["state"] == "up"}
    return up if set(AZS.values()) <= up else None


def availability_zones(c):
    wait_for("two nova-compute services up", lambda: compute_hosts(c), timeout=300, interval=2)
    aggs = c.get("compute", "/os-aggregates")["aggregates"]
    for az, host in AZS.items():
        agg = find(aggs, az)
        if not agg:
            log("create aggregate", az)
            agg = c.post("compute", "/os-aggregates",
                         {"aggregate": {"name": az, "availability_zone": az}})["aggregate"]
        if host in agg.get("hosts", []):
            continue

        # The host can be added once the scheduler has mapped it to the cell.
        def add():
            try:
                c.post("compute", "/os-aggregates/%s/action" % agg["id"],
                       {"add_host": {"host": host}})
                return True
            except ApiError as e:
                if e.status == 404:
                    return False
                raise
        wait_for("host %s mapped to a cell" % host, add, timeout=300, interval=2)
        log("aggregate", az, "has", host)


def public_network(c):
    nets = c.get("network", "/v2.0/networks?name=public")["networks"]
    if nets:
        net = nets[0]
    else:
        log("create external network public")
        net = c.post("network", "/v2.0/networks", {"network": {
            "name": "public", "router:external": True, "shared": False,
            "provider:network_type": "flat", "provider:physical_network": "public"}})["network"]
    if not net["subnets"]:
        c.post("network", "/v2.0/subnets", {"subnet": {
            "name": "public-subnet", "network_id": net["id"], "cidr": PUBLIC_CIDR,
            "ip_version": 4, "enable_dhcp": False, "gateway_ip": PUBLIC_CIDR.replace("0/24", "1"),
            "allocation_pools": [{"start": PUBLIC_CIDR.replace("0/24", "10"),
                                  "end": PUBLIC_CIDR.replace("0/24", "250")}]}})


def flavors(c):
    have = {f["name"] for f in c.get("compute", "/flavors?is_public=None")["flavors"]}
    for name, vcpus, ram, disk in FLAVORS:
        if name not in have:
            log("create flavor", name)
            c.post("compute", "/flavors", {"flavor": {
                "name": name, "vcpus": vcpus, "ram": ram, "disk": disk}})


def images(c):
    for name, kube in IMAGES:
        found = c.get("image", "/v2/images?name=%s" % name)["images"]
        if found and found[0]["status"] == "active":
            continue
        for img in found:
            c.delete("image", "/v2/images/%s" % img["id"])
        log("create image", name)
        img = c.post("image", "/v2/images", {
            "name": name, "disk_format": "raw", "container_format": "bare",
            "visibility": "public", "min_disk": 1, "min_ram": 0,
            "kube_version": kube, "os_distro": "ubuntu", "os_version": "24.04",
            "os_type": "linux", "architecture": "x86_64"})
        c.put("image", "/v2/images/%s/file" % img["id"], data=b"\0" * (1 << 20),
              headers={"Content-Type": "application/octet-stream"})
        wait_for("image %s active" % name,
                 lambda: c.get("image", "/v2/images/%s" % img["id"])["status"] == "active",
                 timeout=60)


def cinder_ready(c):
    def up():
        svcs = c.get("volumev3", "/os-services")["services"]
        zones = {s["zone"] for s in svcs if s["binary"] == "cinder-volume" and s["state"] == "up"}
        return set(AZS) <= zones
    wait_for("cinder-volume up in %s" % sorted(AZS), up, timeout=300, interval=2)


# Volume types besides Cinder's own __DEFAULT__: the addons render a StorageClass per type.
VOLUME_TYPES = {"standard": "HDD-backed volumes", "fast-ssd": "SSD-backed volumes"}


def volume_types(c):
    have = {t["name"] for t in c.get("volumev3", "/types")["volume_types"]}
    for name, description in VOLUME_TYPES.items():
        if name not in have:
            log("create volume type", name)
            c.post("volumev3", "/types", {"volume_type": {
                "name": name, "description": description,
                "os-volume-type-access:is_public": True}})


def app_credential():
    path = os.path.join(STATE, "appcred.json")
    m = Client.password(MEMBER_USER, PW, MEMBER_PROJECT)
    if os.path.exists(path):
        cred = json.load(open(path))
        try:
            Client.appcred(cred["id"], cred["secret"])
            return cred
        except ApiError:
            pass
    name = "stackhook-tests"
    base = "/users/%s/application_credentials" % m.user_id
    for old in m.get("identity", base + "?name=" + name)["application_credentials"]:
        m.delete("identity", base + "/" + old["id"])
    log("create application credential", name)
    ac = m.post("identity", base, {"application_credential": {
        "name": name, "description": "member user's credential for the test suite"}})[
        "application_credential"]
    cred = {"id": ac["id"], "secret": ac["secret"], "name": name}
    tmp = path + ".tmp"
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        json.dump(cred, f)
    os.replace(tmp, path)
    return cred


def clouds_yaml(cred):
    common = {"region_name": REGION, "interface": "public", "identity_api_version": 3}

    def pw_entry(user, project):
        return dict(common, auth_type="password", auth={
            "auth_url": AUTH_URL, "username": user, "password": PW, "project_name": project,
            "user_domain_name": "Default", "project_domain_name": "Default"})
    doc = {"clouds": {
        "admin": pw_entry("admin", "admin"),
        "member": pw_entry(MEMBER_USER, MEMBER_PROJECT),
        "member-appcred": dict(common, auth_type="v3applicationcredential", auth={
            "auth_url": AUTH_URL, "application_credential_id": cred["id"],
            "application_credential_secret": cred["secret"]}),
    }}
    path = os.path.join(STATE, "clouds.yaml")
    with open(path + ".tmp", "w") as f:
        f.write("# Written by tests/cloud/up. Loopback-only test cloud; throwaway secrets.\n")
        yaml.safe_dump(doc, f, sort_keys=False)
    os.replace(path + ".tmp", path)
    log("wrote", path)


def resources():
    c = Client.admin()
    missing = [t for t in PORTS if t not in c.catalog and (WITH_CINDER or t != "volumev3")]
    if missing:
        raise SystemExit("catalog lacks %s" % missing)
    public_network(c)
    flavors(c)
    images(c)
    availability_zones(c)
    if WITH_CINDER:
        cinder_ready(c)
        volume_types(c)
    clouds_yaml(app_credential())
    log("resources done")


# ---------------------------------------------------------------- scrub
def scrub():
    """A cloud's database outlives test runs; a run killed halfway leaves resources
    whose fixed names the next run would find and count as its own."""
    c = Client.admin()

    def gone(service, path, key, keep=lambda _: False, timeout=120):
        left = []
        deadline = time.time() + timeout
        while time.time() < deadline:
            left = [x for x in c.get(service, path)[key] if not keep(x)]
            if not left:
                return
            time.sleep(1)
        log("still there after %d s: %s" % (timeout, [x.get("id") for x in left]))

    def each(service, path, key, delete, keep=lambda _: False):
        n = 0
        for x in c.get(service, path)[key]:
            if keep(x):
                continue
            try:
                delete(x)
                n += 1
            except ApiError as e:
                log("scrub: %s" % e)
        if n:
            log("scrub: %d %s" % (n, key))
        return n

    if each("compute", "/servers/detail?all_tenants=1", "servers",
            lambda s: c.delete("compute", "/servers/" + s["id"])):
        gone("compute", "/servers/detail?all_tenants=1", "servers")
    lbs = "/v2/lbaas/loadbalancers"
    if each("load-balancer", lbs, "loadbalancers",
            lambda lb: c.call("load-balancer", "DELETE",
                              "%s/%s?cascade=true" % (lbs, lb["id"]))):
        gone("load-balancer", lbs, "loadbalancers")
    each("network", "/v2.0/floatingips", "floatingips",
         lambda f: c.delete("network", "/v2.0/floatingips/" + f["id"]))

    def router(r):
        ifaces = c.get("network", "/v2.0/ports?device_id=%s&device_owner="
                       "network:router_interface" % r["id"])["ports"]
        for p in ifaces:
            c.put("network", "/v2.0/routers/%s/remove_router_interface" % r["id"],
                  {"port_id": p["id"]})
        c.delete("network", "/v2.0/routers/" + r["id"])
    each("network", "/v2.0/routers", "routers", router)
    public = {n["id"] for n in c.get("network", "/v2.0/networks?name=public")["networks"]}
    each("network", "/v2.0/ports", "ports",
         lambda p: c.delete("network", "/v2.0/ports/" + p["id"]),
         keep=lambda p: p["network_id"] in public or p["device_owner"].startswith("network:dhcp"))
    each("network", "/v2.0/networks", "networks",
         lambda n: c.delete("network", "/v2.0/networks/" + n["id"]),
         keep=lambda n: n["id"] in public)
    each("network", "/v2.0/security-groups", "security_groups",
         lambda g: c.delete("network", "/v2.0/security-groups/" + g["id"]),
         keep=lambda g: g["name"] == "default")
    if "volumev3" in c.catalog:
        each("volumev3", "/volumes/detail?all_tenants=1", "volumes",
             lambda v: c.call("volumev3", "POST", "/volumes/%s/action" % v["id"],
                              {"os-force_delete": {}}))
    # Tests upload images for versions the cloud is provisioned without; a later
    # run must find those versions missing again.
    provisioned = {name for name, _ in IMAGES}
    each("image", "/v2/images?limit=1000", "images",
         lambda i: c.delete("image", "/v2/images/" + i["id"]),
         keep=lambda i: i["name"] in provisioned)
    each("compute", "/os-server-groups?all_projects=true", "server_groups",
         lambda g: c.delete("compute", "/os-server-groups/" + g["id"]))
    # smoke.py --own-project makes a project and a user of the same name per run.
    each("identity", "/users", "users",
         lambda u: c.delete("identity", "/users/" + u["id"]),
         keep=lambda u: not u["name"].startswith("smoke-"))
    each("identity", "/projects", "projects",
         lambda p: c.delete("identity", "/projects/" + p["id"]),
         keep=lambda p: not p["name"].startswith("smoke-"))
    log("scrub done")


# ---------------------------------------------------------------- listeners
def check_listeners():
    pids = set()
    groups = set()
    for name in os.listdir(os.path.join(STATE, "pids")):
        if proc_alive(name):
            groups.add(open(os.path.join(STATE, "pids", name)).read().split()[0])
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                st = open("/proc/%s/stat" % d).read().rsplit(") ", 1)[1].split()
            except OSError:
                continue
            if st[2] in groups:
                pids.add(d)
    inodes = {}
    for pid in pids:
        try:
            for fd in os.listdir("/proc/%s/fd" % pid):
                try:
                    t = os.readlink("/proc/%s/fd/%s" % (pid, fd))
                except OSError:
                    continue
                if t.startswith("socket:["):
                    inodes[t[8:-1]] = pid
        except OSError:
            pass
    bad = []
    seen = 0
    loop4 = "0100007F"
    loop6 = {"00000000000000000000000001000000", "0000000000000000FFFF00000100007F"}
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        try:
            lines = open("/proc/net/" + proto).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            local, remote, state, inode = f[1], f[2], f[3], f[9]
            if inode not in inodes:
                continue
            listening = state == "0A" if proto.startswith("tcp") else remote.endswith(":0000")
            if not listening:
                continue
            seen += 1
            addr, port = local.split(":")
            if addr != loop4 and addr not in loop6:
                comm = open("/proc/%s/comm" % inodes[inode]).read().strip()
                bad.append("%s %s:%d (pid %s %s)" % (proto, addr, int(port, 16), inodes[inode], comm))
    for b in bad:
        print("NOT LOOPBACK:", b)
    print("checked %d listening sockets of %d processes" % (seen, len(pids)))
    return 1 if bad else 0


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "ping":
        Client.admin()
        return 0
    if cmd == "wait-http":
        return wait_http(sys.argv[2], sys.argv[3])
    if cmd == "identity":
        identity()
        return 0
    if cmd == "resources":
        resources()
        return 0
    if cmd == "scrub":
        scrub()
        return 0
    if cmd == "check-listeners":
        return check_listeners()
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
