"""Minimal OpenStack REST client for the test cloud's scripts (requests only).

One Keystone token per Client, endpoints from the token's catalog, optional
microversion headers. Used by provision.py and smoke.py.
"""
import os
import time

import requests

STATE = os.environ.get("STACKHOOK_CLOUD_DIR", "/var/tmp/stackhook-cloud")
BASE = int(os.environ.get("STACKHOOK_CLOUD_PORT_BASE", "17000"))
PORTS = {
    "identity": BASE + 0,
    "compute": BASE + 1,
    "placement": BASE + 2,
    "image": BASE + 3,
    "network": BASE + 4,
    "load-balancer": BASE + 5,
    "volumev3": BASE + 6,
}
AUTH_URL = "http://127.0.0.1:%d/v3" % PORTS["identity"]
REGION = "RegionOne"
PW = "stackhook-cloud"
TIMEOUT = 60


class ApiError(Exception):
    def __init__(self, method, url, resp):
        self.status = resp.status_code
        self.body = resp.text[:600]
        super().__init__("%s %s -> %s %s" % (method, url, resp.status_code, self.body))


class Client:
    """Token-scoped client. auth is a Keystone v3 'auth' body."""

    def __init__(self, auth, auth_url=AUTH_URL, region=REGION):
        self.http = requests.Session()
        self.http.trust_env = False  # never go through a proxy: loopback only
        url = auth_url.rstrip("/") + "/auth/tokens"
        r = self.http.post(url, json={"auth": auth}, timeout=TIMEOUT)
        if r.status_code != 201:
            raise ApiError("POST", url, r)
        self.token = r.headers["X-Subject-Token"]
        body = r.json()["token"]
        self.body = body
        self.user_id = body["user"]["id"]
        self.project_id = (body.get("project") or {}).get("id")
        self.roles = [x["name"] for x in body.get("roles", [])]
        self.catalog = {}
        for svc in body.get("catalog", []):
            for ep in svc["endpoints"]:
                if ep["interface"] == "public" and ep.get("region_id") == region:
                    self.catalog[svc["type"]] = ep["url"].rstrip("/")
        self.http.headers["X-Auth-Token"] = self.token

    @classmethod
    def password(cls, user, password, project, domain="Default"):
        return cls({
            "identity": {"methods": ["password"], "password": {"user": {
                "name": user, "domain": {"name": domain}, "password": password}}},
            "scope": {"project": {"name": project, "domain": {"name": domain}}},
        })

    @classmethod
    def appcred(cls, cred_id, secret):
        return cls({"identity": {"methods": ["application_credential"],
                                 "application_credential": {"id": cred_id, "secret": secret}}})

    @classmethod
    def from_clouds_entry(cls, entry):
        """Client for one entry of a clouds.yaml (password or application credential)."""
        a = entry["auth"]
        region = entry.get("region_name", REGION)
        if entry.get("auth_type") in ("v3applicationcredential", "application_credential"):
            body = {"identity": {"methods": ["application_credential"], "application_credential": {
                "id": a["application_credential_id"],
                "secret": a["application_credential_secret"]}}}
        else:
            body = {
                "identity": {"methods": ["password"], "password": {"user": {
                    "name": a["username"], "domain": {"name": a.get("user_domain_name", "Default")},
                    "password": a["password"]}}},
                "scope": {"project": {"name": a["project_name"], "domain": {
                    "name": a.get("project_domain_name", "Default")}}},
            }
        url = a["auth_url"].rstrip("/")
        if not url.endswith("/v3"):
            url += "/v3"
        return cls(body, auth_url=url, region=region)

    @classmethod
    def admin(cls):
        return cls.password("admin", PW, "admin")

    def url(self, service, path):
        if path.startswith("http"):
            return path
        return self.catalog[service] + path

    def call(self, service, method, path, body=None, mv=None, ok=(200, 201, 202, 204),
             data=None, headers=None):
        h = dict(headers or {})
        if mv:
            h["OpenStack-API-Version"] = "%s %s" % (
                "volume" if service == "volumev3" else service, mv)
            if service == "compute":
                h["X-OpenStack-Nova-API-Version"] = mv
        url = self.url(service, path)
        for attempt in range(3):
            try:
                r = self.http.request(method, url, json=body, data=data, headers=h,
                                      timeout=TIMEOUT)
                break
            except requests.ConnectionError:
                # a kept-alive connection closed by the server: retry reads
                if method not in ("GET", "HEAD", "DELETE") or attempt == 2:
                    raise
                time.sleep(0.5)
        if r.status_code not in ok:
            raise ApiError(method, url, r)
        if r.status_code == 204 or not r.content:
            return {}
        try:
            return r.json()
        except ValueError:
            return {}

    def get(self, service, path, **kw):
        return self.call(service, "GET", path, **kw)

    def post(self, service, path, body, **kw):
        return self.call(service, "POST", path, body, **kw)

    def put(self, service, path, body=None, **kw):
        return self.call(service, "PUT", path, body, **kw)

    def delete(self, service, path, **kw):
        kw.setdefault("ok", (200, 202, 204, 404))
        return self.call(service, "DELETE", path, **kw)


def wait_for(what, fn, timeout=180, interval=0.5):
    """Poll fn() until it returns a truthy value; raise TimeoutError after timeout."""
    end = time.time() + timeout
    last = None
    while time.time() < end:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError("timed out after %ss waiting for %s (last: %r)" % (timeout, what, last))
