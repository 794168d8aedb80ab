#!/usr/bin/env python3
"""Smoke test of the test cloud through the real REST APIs, as the non-admin user.

    python3 tests/cloud/smoke.py [--cloud member] [--clouds PATH] [--own-project]

clouds.yaml: --clouds, else $STACKHOOK_TEST_CLOUD, else the state dir's.
--own-project: run in a new project instead of --cloud's, so that other tests
may use that project meanwhile: as the clouds.yaml's `admin`, create a project
and a user with the roles member and load-balancer_member in it, run as that
user (auth URL, region, interface from --cloud's entry), check an application
credential of that user instead of `member-appcred`, and delete the user and
the project at the end.
Needs requests and PyYAML; without them it re-runs itself with the Python of
the cloud's tools venv (installed by tests/cloud/up, versions from
constraints.txt). Creates a network, subnet, router, security group, floating
IP, load balancer, server groups (Nova 2.63 and 2.64 bodies), servers,
volumes; checks each; deletes everything and checks that the project's
resource counts are back where they started. Last line:
"smoke: N passed, M failed"; exit status 1 if anything failed.
"""
import copy
import os
import secrets
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STATE = os.environ.get("STACKHOOK_CLOUD_DIR", "/var/tmp/stackhook-cloud")

try:
    import requests  # noqa: F401
    import yaml
except ImportError:
    venv_py = os.path.join(STATE, "venv", "tools", "bin", "python")
    if os.path.exists(venv_py) and os.path.realpath(sys.executable) != os.path.realpath(venv_py):
        os.execv(venv_py, [venv_py] + sys.argv)
    sys.exit("smoke: needs requests and PyYAML (run tests/cloud/up first)")

sys.path.insert(0, HERE)
from cloudapi import ApiError, Client, wait_for  # noqa: E402

T0 = time.time()
RESULTS = []
PREFIX = "smoke-%d-" % os.getpid()


def say(msg):
    print("[%6.1fs] %s" % (time.time() - T0, msg), flush=True)


def check(name, fn, *args):
    """Run one check; record pass/fail; return fn's value (None on failure)."""
    t = time.time()
    try:
        value = fn(*args)
    except Exception as e:  # noqa: BLE001 - any failure is a failed check
        RESULTS.append((name, False))
        say("FAIL %s (%.1fs): %s: %s" % (name, time.time() - t, type(e).__name__, e))
        return None
    RESULTS.append((name, True))
    say("ok   %s (%.1fs)" % (name, time.time() - t))
    return value if value is not None else True


def expect(cond, msg):
    if not cond:
        raise AssertionError(msg)


def load_entry(path, name):
    doc = yaml.safe_load(open(path))
    return doc["clouds"][name]


def main():
    args = sys.argv[1:]
    cloud = "member"
    path = os.environ.get("STACKHOOK_TEST_CLOUD") or os.path.join(STATE, "clouds.yaml")
    own = None
    while args:
        a = args.pop(0)
        if a == "--cloud":
            cloud = args.pop(0)
        elif a == "--clouds":
            path = args.pop(0)
        elif a == "--own-project":
            own = {}
        else:
            sys.exit(__doc__)
    say("clouds.yaml %s, cloud %s%s" % (path, cloud, ", own project" if own is not None else ""))
    entry = load_entry(path, cloud)
    created = {}
    try:
        if own is not None:
            entry = check("own project, user with roles member and load-balancer_member "
                          "(as admin)", own_project, path, entry, own)
            cloud = own.get("name", cloud)
        if entry:
            run(path, cloud, entry, created, own)
    except Exception as e:  # noqa: BLE001 - report, clean up, fail
        RESULTS.append(("unexpected error", False))
        say("FAIL unexpected error: %s: %s" % (type(e).__name__, e))
    finally:
        c = created.pop("client", None)
        if c is not None and created:
            say("cleaning up after failure: %s" % sorted(created))
            try:
                cleanup(c, created)
            except Exception as e:  # noqa: BLE001
                say("cleanup failed: %s" % e)
        if own and (own.get("project") or own.get("user")):
            check("delete own project and user (as admin)", drop_own_project, own)
    passed = sum(1 for _, ok in RESULTS if ok)
    failed = len(RESULTS) - passed
    say("done")
    print("smoke: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


# ---------------------------------------------------------------------------
def own_project(path, entry, own):
    """Create a project and a user in it as admin; return a clouds entry for that user.

    Fills own with the admin client and the IDs, for drop_own_project."""
    a = own["admin"] = Client.from_clouds_entry(load_entry(path, "admin"))
    name = own["name"] = PREFIX + secrets.token_hex(4)
    password = secrets.token_urlsafe(24)
    p = a.post("identity", "/projects", {"project": {
        "name": name, "domain_id": "default", "description": "smoke.py run"}})["project"]
    own["project"] = p["id"]
    u = a.post("identity", "/users", {"user": {
        "name": name, "domain_id": "default", "password": password,
        "default_project_id": p["id"]}})["user"]
    own["user"] = u["id"]
    for role in ("member", "load-balancer_member"):
        found = [r for r in a.get("identity", "/roles?name=%s" % role)["roles"]
                 if r["name"] == role]
        expect(found, "role %s missing" % role)
        a.put("identity", "/projects/%s/users/%s/roles/%s" % (p["id"], u["id"], found[0]["id"]))
    own_entry = copy.deepcopy(entry)
    own_entry["auth_type"] = "password"
    own_entry["auth"] = {
        "auth_url": entry["auth"]["auth_url"], "username": name, "password": password,
        "project_name": name, "user_domain_name": "Default", "project_domain_name": "Default"}
    return own_entry


def drop_own_project(own):
    """Delete the own project's user and project, and the default security group
    Neutron made for the project (Neutron keeps it when Keystone deletes the project)."""
    a = own["admin"]
    errors = []

    def step(fn, *args, **kw):
        try:
            fn(*args, **kw)
        except Exception as e:  # noqa: BLE001 - keep deleting the rest
            errors.append("%s: %s" % (type(e).__name__, e))

    if own.get("project"):
        def security_groups():
            for g in a.get("network", "/v2.0/security-groups?project_id=%s" % own["project"])[
                    "security_groups"]:
                a.delete("network", "/v2.0/security-groups/%s" % g["id"])
        step(security_groups)
    if own.get("user"):
        step(a.delete, "identity", "/users/%s" % own.pop("user"), ok=(204,))
    if own.get("project"):
        step(a.delete, "identity", "/projects/%s" % own.pop("project"), ok=(204,))
    if errors:
        raise AssertionError("; ".join(errors))


def counts(c, with_volumes):
    p = c.project_id
    n = {
        "networks": len(c.get("network", "/v2.0/networks?project_id=%s" % p)["networks"]),
        "subnets": len(c.get("network", "/v2.0/subnets?project_id=%s" % p)["subnets"]),
        "routers": len(c.get("network", "/v2.0/routers?project_id=%s" % p)["routers"]),
        "ports": len(c.get("network", "/v2.0/ports?project_id=%s" % p)["ports"]),
        "security_groups": len(c.get("network", "/v2.0/security-groups?project_id=%s" % p)[
            "security_groups"]),
        "security_group_rules": len(c.get(
            "network", "/v2.0/security-group-rules?project_id=%s" % p)["security_group_rules"]),
        "floatingips": len(c.get("network", "/v2.0/floatingips?project_id=%s" % p)["floatingips"]),
        "loadbalancers": len(c.get("load-balancer", "/v2/lbaas/loadbalancers?project_id=%s" % p)[
            "loadbalancers"]),
        "servers": len(c.get("compute", "/servers")["servers"]),
        "server_groups": len(c.get("compute", "/os-server-groups")["server_groups"]),
    }
    if with_volumes:
        n["volumes"] = len(c.get("volumev3", "/volumes")["volumes"])
    return n


def server_status(c, sid):
    s = c.get("compute", "/servers/%s" % sid, mv="2.63")["server"]
    if s["status"] == "ERROR":
        raise AssertionError("server %s went to ERROR: %s" % (sid, s.get("fault")))
    return s if s["status"] == "ACTIVE" else None


def lb_status(c, lb_id, want="ACTIVE"):
    lb = c.get("load-balancer", "/v2/lbaas/loadbalancers/%s" % lb_id)["loadbalancer"]
    if lb["provisioning_status"] == "ERROR":
        raise AssertionError("load balancer %s went to ERROR" % lb_id)
    return lb if lb["provisioning_status"] == want else None


def run(path, cloud, entry, created, own=None):
    def auth():
        m = Client.from_clouds_entry(entry)
        need = {"identity", "compute", "network", "load-balancer", "image", "placement",
                "volumev3"}
        expect(need <= set(m.catalog), "catalog lacks %s" % (need - set(m.catalog)))
        expect("admin" not in m.roles, "user %s is admin" % cloud)
        expect(m.project_id, "token not project-scoped")
        return m
    c = check("token and catalog (identity, compute, network, load-balancer, image, placement, "
              "volumev3) as %s" % cloud, auth)
    if not c:
        return None
    created["client"] = c

    def appcred():
        doc = yaml.safe_load(open(path))["clouds"]
        ac = Client.from_clouds_entry(doc["member-appcred"])
        expect(ac.project_id == c.project_id, "appcred scoped to another project")
        ac.get("compute", "/flavors")

    def own_appcred():
        base = "/users/%s/application_credentials" % c.user_id
        cred = c.post("identity", base, {"application_credential": {
            "name": PREFIX + "appcred", "description": "smoke.py run"}})[
            "application_credential"]
        try:
            ac = Client.from_clouds_entry(dict(entry, auth_type="v3applicationcredential", auth={
                "auth_url": entry["auth"]["auth_url"], "application_credential_id": cred["id"],
                "application_credential_secret": cred["secret"]}))
            expect(ac.project_id == c.project_id, "appcred scoped to another project")
            ac.get("compute", "/flavors")
        finally:
            c.delete("identity", "%s/%s" % (base, cred["id"]), ok=(204,))
    if own is None:
        check("application credential token (member-appcred) works", appcred)
    else:
        check("application credential of the own user: token scoped to its project works, "
              "deleted after", own_appcred)

    # STACKHOOK_CLOUD_CINDER=0 (cloud started without Cinder): skip the volume checks.
    with_volumes = os.environ.get("STACKHOOK_CLOUD_CINDER", "1") != "0" and bool(
        check("volume API answers", lambda: c.get("volumev3", "/volumes")))

    def images():
        imgs = c.get("image", "/v2/images?kube_version=v1.33.1")["images"]
        expect(imgs and imgs[0]["status"] == "active", "no active image with kube_version=v1.33.1")
        return imgs[0]
    image = check("image with kube_version=v1.33.1", images)

    def flavors():
        f = {x["name"]: x["id"] for x in c.get("compute", "/flavors")["flavors"]}
        for name in ("m1.tiny", "m1.small", "m1.medium"):
            expect(name in f, "flavor %s missing" % name)
        return f
    flv = check("flavors m1.tiny, m1.small, m1.medium", flavors) or {}

    def azs():
        zones = {z["zoneName"] for z in c.get("compute", "/os-availability-zone")[
            "availabilityZoneInfo"] if z["zoneState"]["available"]}
        expect({"az1", "az2"} <= zones, "availability zones: %s" % zones)
    check("availability zones az1 and az2", azs)

    # Neutron makes the project's default security group on first use.
    c.get("network", "/v2.0/security-groups")
    before = check("count project resources before", counts, c, with_volumes)

    # ---- network
    def public():
        nets = c.get("network", "/v2.0/networks?router:external=true&name=public")["networks"]
        expect(nets, "external network public not visible")
        return nets[0]
    pub = check("external network public visible", public)

    def network():
        n = c.post("network", "/v2.0/networks", {"network": {"name": PREFIX + "net"}})["network"]
        created["network"] = n["id"]
        return n
    net = check("create network", network)

    def subnet():
        s = c.post("network", "/v2.0/subnets", {"subnet": {
            "name": PREFIX + "subnet", "network_id": net["id"], "cidr": "10.42.0.0/24",
            "ip_version": 4}})["subnet"]
        created["subnet"] = s["id"]
        return s
    sub = check("create subnet", subnet)

    def router():
        r = c.post("network", "/v2.0/routers", {"router": {
            "name": PREFIX + "router",
            "external_gateway_info": {"network_id": pub["id"]}}})["router"]
        created["router"] = r["id"]
        gw = r.get("external_gateway_info") or {}
        expect(gw.get("network_id") == pub["id"], "gateway not on public")
        expect(gw.get("external_fixed_ips"), "gateway has no address")
        return r
    rtr = check("create router with gateway on public", router)

    def interface():
        c.put("network", "/v2.0/routers/%s/add_router_interface" % rtr["id"],
              {"subnet_id": sub["id"]})
        created["router_interface"] = sub["id"]
        ports = c.get("network", "/v2.0/ports?device_id=%s&device_owner=network:router_interface"
                      % rtr["id"])["ports"]
        expect(len(ports) == 1, "router interface port missing")
    check("add router interface", interface)

    def secgroup():
        g = c.post("network", "/v2.0/security-groups", {"security_group": {
            "name": PREFIX + "sg", "description": "smoke"}})["security_group"]
        created["security_group"] = g["id"]
        r = c.post("network", "/v2.0/security-group-rules", {"security_group_rule": {
            "security_group_id": g["id"], "direction": "ingress", "ethertype": "IPv4",
            "protocol": "tcp", "port_range_min": 6443, "port_range_max": 6443,
            "remote_ip_prefix": "10.42.0.0/24"}})["security_group_rule"]
        got = c.get("network", "/v2.0/security-groups/%s" % g["id"])["security_group"]
        expect(r["id"] in [x["id"] for x in got["security_group_rules"]], "rule not listed")
        return g
    sg = check("create security group with a rule", secgroup)

    def fip():
        f = c.post("network", "/v2.0/floatingips", {"floatingip": {
            "floating_network_id": pub["id"]}})["floatingip"]
        created["floatingip"] = f["id"]
        expect(f["floating_ip_address"], "no address")
        return f
    fl = check("allocate floating IP on public", fip)

    # ---- load balancer (runs while the servers boot)
    def lb_create():
        lb = c.post("load-balancer", "/v2/lbaas/loadbalancers", {"loadbalancer": {
            "name": PREFIX + "lb", "vip_subnet_id": sub["id"]}})["loadbalancer"]
        created["loadbalancer"] = lb["id"]
        return lb
    lb = check("create load balancer", lb_create)

    # ---- server groups, servers
    def group_263():
        g = c.post("compute", "/os-server-groups", {"server_group": {
            "name": PREFIX + "sg263", "policies": ["soft-anti-affinity"]}}, mv="2.63")[
            "server_group"]
        created.setdefault("server_groups", []).append(g["id"])
        expect(g.get("policies") == ["soft-anti-affinity"], "policies: %r" % g.get("policies"))
        expect("policy" not in g, "2.63 response has 'policy'")
        return g
    g263 = check("server group soft-anti-affinity, microversion 2.63 (policies list)", group_263)

    def group_264():
        try:
            c.post("compute", "/os-server-groups", {"server_group": {
                "name": PREFIX + "bad", "policies": ["soft-anti-affinity"]}}, mv="2.64")
            raise AssertionError("2.64 accepted the old 'policies' body")
        except ApiError as e:
            expect(e.status == 400, "old body at 2.64: %s" % e.status)
        g = c.post("compute", "/os-server-groups", {"server_group": {
            "name": PREFIX + "sg264", "policy": "soft-anti-affinity", "rules": {}}}, mv="2.64")[
            "server_group"]
        created.setdefault("server_groups", []).append(g["id"])
        expect(g.get("policy") == "soft-anti-affinity", "policy: %r" % g.get("policy"))
        expect("policies" not in g, "2.64 response has 'policies'")
        return g
    g264 = check("server group soft-anti-affinity, microversion 2.64 (policy field, old body 400)",
                 group_264)

    def boot(name, group, az, mv):
        body = {"server": {
            "name": PREFIX + name, "imageRef": image["id"], "flavorRef": flv["m1.tiny"],
            "networks": [{"uuid": net["id"]}], "availability_zone": az,
            "security_groups": [{"name": sg["name"]}]},
            "os:scheduler_hints": {"group": group["id"]}}
        s = c.post("compute", "/servers", body, mv=mv)["server"]
        created.setdefault("servers", []).append(s["id"])
        return s
    s1 = check("boot server into the 2.63 group (az1)", boot, "vm263", g263, "az1", "2.63")
    s2 = check("boot server into the 2.64 group (az2)", boot, "vm264", g264, "az2", "2.90")

    bfv = None
    vol = None
    if with_volumes:
        def boot_from_volume():
            s = c.post("compute", "/servers", {"server": {
                "name": PREFIX + "bfv", "flavorRef": flv["m1.tiny"],
                "networks": [{"uuid": net["id"]}],
                "block_device_mapping_v2": [{
                    "boot_index": 0, "uuid": image["id"], "source_type": "image",
                    "destination_type": "volume", "volume_size": 1,
                    "delete_on_termination": True}]}}, mv="2.67")["server"]
            created.setdefault("servers", []).append(s["id"])
            return s
        bfv = check("boot server from a new volume (image source)", boot_from_volume)

        def volume():
            v = c.post("volumev3", "/volumes", {"volume": {
                "name": PREFIX + "vol", "size": 1, "availability_zone": "az2"}})["volume"]
            created.setdefault("volumes", []).append(v["id"])
            v = wait_for("volume available", lambda: [
                x for x in [c.get("volumev3", "/volumes/%s" % v["id"])["volume"]]
                if x["status"] in ("available", "error")], timeout=120)[0]
            expect(v["status"] == "available", "volume went to %s" % v["status"])
            expect(v["availability_zone"] == "az2", "volume in %s" % v["availability_zone"])
            return v
        vol = check("create volume in az2, reaches available", volume)

    def active(s, group, az, field):
        srv = wait_for("server %s ACTIVE" % s["id"], lambda: server_status(c, s["id"]),
                       timeout=240)
        expect(srv["OS-EXT-AZ:availability_zone"] == az,
               "server in %s, not %s" % (srv["OS-EXT-AZ:availability_zone"], az))
        mv = "2.63" if field == "policies" else "2.64"
        g = c.get("compute", "/os-server-groups/%s" % group["id"], mv=mv)["server_group"]
        expect(s["id"] in g["members"], "server not a member of its group")
        if field == "policies":
            expect(g["policies"] == ["soft-anti-affinity"], "policies %r" % g.get("policies"))
        else:
            expect(g["policy"] == "soft-anti-affinity", "policy %r" % g.get("policy"))
        ports = c.get("network", "/v2.0/ports?device_id=%s" % s["id"])["ports"]
        expect(len(ports) == 1 and ports[0]["status"] == "ACTIVE",
               "server port not ACTIVE: %r" % [p["status"] for p in ports])
        expect(sg["id"] in ports[0]["security_groups"], "security group not on the port")
        return ports[0]
    p1 = check("server in 2.63 group ACTIVE in az1, member of group, port ACTIVE",
               active, s1, g263, "az1", "policies")
    check("server in 2.64 group ACTIVE in az2, member of group, port ACTIVE",
          active, s2, g264, "az2", "policy")

    def associate():
        f = c.put("network", "/v2.0/floatingips/%s" % fl["id"], {"floatingip": {
            "port_id": p1["id"]}})["floatingip"]
        expect(f["port_id"] == p1["id"] and f["fixed_ip_address"], "not associated")
        expect(f["router_id"] == rtr["id"], "floating IP not routed by our router")
    check("associate floating IP with the server's port", associate)

    def lb_active():
        wait_for("load balancer ACTIVE", lambda: lb_status(c, lb["id"]), timeout=180)
        li = c.post("load-balancer", "/v2/lbaas/listeners", {"listener": {
            "loadbalancer_id": lb["id"], "protocol": "TCP", "protocol_port": 6443,
            "name": PREFIX + "listener"}})["listener"]
        wait_for("load balancer ACTIVE after listener", lambda: lb_status(c, lb["id"]), timeout=120)
        pool = c.post("load-balancer", "/v2/lbaas/pools", {"pool": {
            "listener_id": li["id"], "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN"}})["pool"]
        wait_for("load balancer ACTIVE after pool", lambda: lb_status(c, lb["id"]), timeout=120)
        c.post("load-balancer", "/v2/lbaas/pools/%s/members" % pool["id"], {"member": {
            "address": p1["fixed_ips"][0]["ip_address"], "protocol_port": 6443,
            "subnet_id": sub["id"]}})
        wait_for("load balancer ACTIVE after member", lambda: lb_status(c, lb["id"]), timeout=120)
    check("load balancer ACTIVE, with listener, pool and member", lb_active)

    if with_volumes:
        def bfv_active():
            srv = wait_for("boot-from-volume server ACTIVE",
                           lambda: server_status(c, bfv["id"]), timeout=300)
            vols = srv.get("os-extended-volumes:volumes_attached") or []
            expect(len(vols) == 1, "attached volumes: %r" % vols)
            v = c.get("volumev3", "/volumes/%s" % vols[0]["id"])["volume"]
            expect(v["status"] == "in-use" and v["bootable"] == "true",
                   "root volume %s bootable=%s" % (v["status"], v["bootable"]))
        check("boot-from-volume server ACTIVE, root volume in-use", bfv_active)

        def attach():
            c.post("compute", "/servers/%s/os-volume_attachments" % s1["id"],
                   {"volumeAttachment": {"volumeId": vol["id"]}})
            wait_for("volume in-use", lambda: c.get("volumev3", "/volumes/%s" % vol["id"])[
                "volume"]["status"] == "in-use", timeout=120)
            c.delete("compute", "/servers/%s/os-volume_attachments/%s" % (s1["id"], vol["id"]))
            wait_for("volume available again", lambda: c.get(
                "volumev3", "/volumes/%s" % vol["id"])["volume"]["status"] == "available",
                timeout=120)
        check("attach and detach a volume", attach)

    created.pop("client")
    check("delete everything", cleanup, c, created)
    after = check("count project resources after", counts, c, with_volumes)

    def same():
        # Only more is a leak: other runs on the same project may delete their own
        # resources meanwhile.
        diff = {k: (before[k], after.get(k, 0)) for k in before if after.get(k, 0) > before[k]}
        diff.update({k: (0, n) for k, n in after.items() if k not in before and n})
        expect(not diff, "left behind (before, after): %r" % diff)
    check("resource counts back to where they started", same)
    return None


def gone(c, service, path, mv=None):
    try:
        c.get(service, path, mv=mv)
        return False
    except ApiError as e:
        if e.status == 404:
            return True
        raise


def cleanup(c, created):
    """Delete what the run created, in dependency order; wait until gone."""
    errors = []

    def step(fn, *a):
        try:
            fn(*a)
        except Exception as e:  # noqa: BLE001 - keep deleting the rest
            errors.append("%s: %s" % (type(e).__name__, e))

    if created.get("floatingip"):
        step(c.delete, "network", "/v2.0/floatingips/%s" % created.pop("floatingip"))
    if created.get("loadbalancer"):
        lb = created.pop("loadbalancer")
        step(c.delete, "load-balancer", "/v2/lbaas/loadbalancers/%s?cascade=true" % lb)
        step(wait_for, "load balancer deleted",
             lambda: gone(c, "load-balancer", "/v2/lbaas/loadbalancers/%s" % lb), 120)
    servers = created.pop("servers", [])
    for s in servers:
        step(c.delete, "compute", "/servers/%s" % s)
    for s in servers:
        step(wait_for, "server %s deleted" % s, lambda s=s: gone(c, "compute", "/servers/%s" % s),
             180)
    for v in created.pop("volumes", []):
        step(wait_for, "volume %s detached" % v, lambda v=v: gone(
            c, "volumev3", "/volumes/%s" % v) or c.get("volumev3", "/volumes/%s" % v)[
            "volume"]["status"] in ("available", "error"), 120)
        step(c.delete, "volumev3", "/volumes/%s" % v)
        step(wait_for, "volume %s deleted" % v, lambda v=v: gone(c, "volumev3", "/volumes/%s" % v),
             120)
    for g in created.pop("server_groups", []):
        step(c.delete, "compute", "/os-server-groups/%s" % g)
    if created.get("router"):
        r = created.pop("router")
        if created.get("router_interface"):
            step(c.put, "network", "/v2.0/routers/%s/remove_router_interface" % r,
                 {"subnet_id": created.pop("router_interface")})
        step(c.put, "network", "/v2.0/routers/%s" % r, {"router": {"external_gateway_info": {}}})
        step(c.delete, "network", "/v2.0/routers/%s" % r)
    if created.get("security_group"):
        step(c.delete, "network", "/v2.0/security-groups/%s" % created.pop("security_group"))
    if created.get("network"):
        created.pop("subnet", None)
        n = created.pop("network")
        # ports of deleted servers go away with them; wait so the network delete does not race
        step(wait_for, "network ports released", lambda: not [
            p for p in c.get("network", "/v2.0/ports?network_id=%s" % n)["ports"]
            if p["device_owner"].startswith("compute:")], 60)
        step(c.delete, "network", "/v2.0/networks/%s" % n)
    if errors:
        raise AssertionError("; ".join(errors))


if __name__ == "__main__":
    sys.exit(main())
