//! The `openstack` pack (v1) on minimal templates of every kind it selects: each
//! setting reaches exactly the CAPO v1beta1 / kubeadm field it documents, per
//! MachineDeployment overrides stay on their deployment, bad values are refused with
//! their field paths. Expected shapes are CAPO's and kubeadm's documented fields.

use crate::engine_support;

use engine_support::{minimal_items, patched_objects, vars};
use serde_json::{json, Value};
use stackhook::engine::{PackEngine, PatchEngine};
use stackhook::sdk::topology::ValidateTopologyRequest;

const H: &str = "openstack-v1-generate-patches";
const NET: &str = "7c5b8a5e-2d4f-4c1e-9f0a-3b6d2e1f4a5b";
const IMAGE: &str = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b";

fn engine() -> PackEngine {
    PackEngine::embedded().unwrap_or_else(|e| panic!("{e}"))
}

fn base() -> Value {
    json!({
        "openstackCluster": {"externalNetworkID": NET},
        "openstackControlPlane": {"flavor": "m1.large", "image": {"name": "ubuntu-2404-kube-v1.33.1"}},
        "openstackWorker": {"image": {"id": IMAGE}},
    })
}

fn with(mut v: Value, var: &str, value: Value) -> Value {
    v[var] = value;
    v
}

fn spec(objs: &std::collections::BTreeMap<String, Value>, uid: &str) -> Value {
    objs[uid]["spec"]["template"]["spec"].clone()
}

#[test]
fn defaults_on_minimal_templates() {
    let objs = patched_objects(&engine(), H, vars(base()), minimal_items(json!([])));
    let osct = spec(&objs, "osct");
    assert_eq!(
        osct,
        json!({
            "identityRef": {"type": "Secret", "name": "c1-cloud-config", "cloudName": "openstack"},
            "disableExternalNetwork": false,
            "externalNetwork": {"id": NET},
            "managedSubnets": [{"cidr": "10.6.0.0/24", "dnsNameservers": []}],
            "apiServerLoadBalancer": {"enabled": true},
            "disableAPIServerFloatingIP": false,
            "managedSecurityGroups": {"allowAllInClusterTraffic": false, "allNodesSecurityGroupRules": []},
            "tags": [],
            "controlPlaneAvailabilityZones": [],
        })
    );
    let machine = |flavor: &str, image: Value| {
        json!({
            "identityRef": {"type": "Secret", "name": "c1-cloud-config", "cloudName": "openstack"},
            "flavor": flavor,
            "image": image,
            "sshKeyName": "",
            "configDrive": false,
            "tags": [],
            "serverMetadata": [],
            "securityGroups": [],
            "additionalBlockDevices": [],
        })
    };
    assert_eq!(
        spec(&objs, "osmt-cp"),
        machine(
            "m1.large",
            json!({"filter": {"name": "ubuntu-2404-kube-v1.33.1"}})
        )
    );
    assert_eq!(
        spec(&objs, "osmt-md"),
        machine("m1.medium", json!({"id": IMAGE}))
    );
    // kubeadm settings are all off by default: the kubeadm templates stay as written.
    assert_eq!(
        spec(&objs, "kcpt-v1beta1"),
        json!({"kubeadmConfigSpec": {}})
    );
    for uid in ["kcpt-v1beta2", "kct-v1beta1", "kct-v1beta2"] {
        assert_eq!(spec(&objs, uid), json!({}), "{uid}");
    }
}

#[test]
fn every_cluster_setting_reaches_its_capo_field() {
    let cluster = json!({
        "identity": {"secretName": "team-a-creds", "cloudName": "prod"},
        "externalNetworkID": NET,
        "network": {"name": "shared-net"},
        "subnet": {"id": IMAGE},
        "apiServerLoadBalancer": {"enabled": true, "provider": "ovn", "flavor": "small", "availabilityZone": "az2", "allowedCIDRs": ["192.0.2.0/24"]},
        "apiServerFloatingIP": {"mode": "given", "address": "203.0.113.7"},
        "bastion": {"enabled": true, "flavor": "m1.small", "imageName": "debian-12", "sshKeyName": "ops", "availabilityZone": "az1", "floatingIP": "203.0.113.8"},
        "allowAllInClusterTraffic": true,
        "securityGroupRules": [{"name": "ssh", "direction": "ingress", "etherType": "IPv4", "protocol": "tcp", "portRangeMin": 22, "portRangeMax": 22, "remoteIPPrefix": "10.0.0.0/8"}],
        "tags": ["team-a"],
        "controlPlaneAvailabilityZones": ["az1", "az2"],
    });
    let objs = patched_objects(
        &engine(),
        H,
        vars(with(base(), "openstackCluster", cluster)),
        minimal_items(json!([])),
    );
    let osct = spec(&objs, "osct");
    assert_eq!(
        osct["identityRef"],
        json!({"type": "Secret", "name": "team-a-creds", "cloudName": "prod"})
    );
    assert_eq!(osct["network"], json!({"filter": {"name": "shared-net"}}));
    assert_eq!(osct["subnets"], json!([{"id": IMAGE}]));
    assert!(osct.get("managedSubnets").is_none(), "{osct}");
    assert_eq!(
        osct["apiServerLoadBalancer"],
        json!({"enabled": true, "provider": "ovn", "flavor": "small", "availabilityZone": "az2", "allowedCIDRs": ["192.0.2.0/24"]})
    );
    assert_eq!(osct["disableAPIServerFloatingIP"], false);
    assert_eq!(osct["apiServerFloatingIP"], "203.0.113.7");
    assert_eq!(
        osct["bastion"],
        json!({"enabled": true, "availabilityZone": "az1", "floatingIP": "203.0.113.8",
               "spec": {"flavor": "m1.small", "image": {"filter": {"name": "debian-12"}}, "sshKeyName": "ops"}})
    );
    assert_eq!(
        osct["managedSecurityGroups"],
        json!({"allowAllInClusterTraffic": true, "allNodesSecurityGroupRules": [
            {"name": "ssh", "direction": "ingress", "etherType": "IPv4", "protocol": "tcp", "portRangeMin": 22, "portRangeMax": 22, "remoteIPPrefix": "10.0.0.0/8"}]})
    );
    assert_eq!(osct["tags"], json!(["team-a"]));
    assert_eq!(osct["controlPlaneAvailabilityZones"], json!(["az1", "az2"]));
    // The machines use the same identity.
    assert_eq!(
        spec(&objs, "osmt-md")["identityRef"]["name"],
        "team-a-creds"
    );

    // A managed subnet with DNS and pools; no floating IP at all.
    let cluster = json!({
        "externalNetworkID": NET,
        "nodeCIDR": "10.20.0.0/22",
        "dnsNameservers": ["192.0.2.53"],
        "allocationPools": [{"start": "10.20.1.10", "end": "10.20.1.200"}],
        "apiServerLoadBalancer": {"enabled": false},
        "apiServerFloatingIP": {"mode": "none"},
    });
    let objs = patched_objects(
        &engine(),
        H,
        vars(with(base(), "openstackCluster", cluster)),
        minimal_items(json!([])),
    );
    let osct = spec(&objs, "osct");
    assert_eq!(
        osct["managedSubnets"],
        json!([{"cidr": "10.20.0.0/22", "dnsNameservers": ["192.0.2.53"], "allocationPools": [{"start": "10.20.1.10", "end": "10.20.1.200"}]}])
    );
    assert_eq!(osct["apiServerLoadBalancer"], json!({"enabled": false}));
    assert_eq!(osct["disableAPIServerFloatingIP"], true);
    assert!(osct.get("apiServerFloatingIP").is_none());
}

#[test]
fn machine_settings_and_per_deployment_overrides() {
    let cp = json!({
        "flavor": "m1.xlarge",
        "image": {"id": IMAGE},
        "sshKeyName": "ops",
        "rootVolume": {"sizeGiB": 50, "type": "ssd", "availabilityZone": "nova-vol"},
        "serverGroup": {"policy": "soft-anti-affinity"},
        "additionalVolumes": [{"name": "etcd", "sizeGiB": 10, "type": "fast"}],
        "securityGroups": ["monitoring"],
        "tags": ["cp"],
        "serverMetadata": {"owner": "team-a"},
        "configDrive": true,
    });
    let over = json!([{"name": "openstackWorker", "value": {
        "flavor": "gpu.large", "image": {"name": "ubuntu-gpu"}, "serverGroup": {"id": NET}
    }}]);
    let objs = patched_objects(
        &engine(),
        H,
        vars(with(base(), "openstackControlPlane", cp)),
        minimal_items(over),
    );
    let m = spec(&objs, "osmt-cp");
    assert_eq!(m["flavor"], "m1.xlarge");
    assert_eq!(m["image"], json!({"id": IMAGE}));
    assert_eq!(m["sshKeyName"], "ops");
    assert_eq!(
        m["rootVolume"],
        json!({"sizeGiB": 50, "type": "ssd", "availabilityZone": {"from": "Name", "name": "nova-vol"}})
    );
    assert_eq!(
        m["extensions"],
        json!({"serverGroupPolicy": "soft-anti-affinity"})
    );
    assert!(m.get("serverGroup").is_none());
    assert_eq!(
        m["additionalBlockDevices"],
        json!([{"name": "etcd", "sizeGiB": 10, "storage": {"type": "Volume", "volume": {"type": "fast"}}}])
    );
    assert_eq!(
        m["securityGroups"],
        json!([{"filter": {"name": "monitoring"}}])
    );
    assert_eq!(m["tags"], json!(["cp"]));
    assert_eq!(
        m["serverMetadata"],
        json!([{"key": "owner", "value": "team-a"}])
    );
    assert_eq!(m["configDrive"], true);
    // The MachineDeployment's override replaces the worker value for it alone,
    // defaulted by the schema (flavor given, sshKeyName back to "").
    let w = spec(&objs, "osmt-md");
    assert_eq!(w["flavor"], "gpu.large");
    assert_eq!(w["image"], json!({"filter": {"name": "ubuntu-gpu"}}));
    assert_eq!(w["serverGroup"], json!({"id": NET}));
    assert!(w.get("rootVolume").is_none());
    assert!(w.get("extensions").is_none());
}

#[test]
fn kubeadm_settings_under_both_contracts() {
    let k = json!({
        "apiServerSANs": ["api.example.com"],
        "admissionPlugins": ["NodeRestriction", "AlwaysPullImages"],
        "tlsCipherSuites": ["TLS_AES_128_GCM_SHA256", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"],
        "auditLog": {"enabled": true, "maxAge": 7},
        "oidc": {"issuerURL": "https://id.example.com", "clientID": "k8s"},
        "keystoneAuth": {"enabled": true},
        "proxy": {"http": "http://proxy:3128", "noProxy": ["10.0.0.0/8", ".svc"]},
        "imageRepository": "registry.example.com/k8s",
        "operatingSystem": "ubuntu",
    });
    let objs = patched_objects(
        &engine(),
        H,
        vars(with(base(), "kubernetes", k)),
        minimal_items(json!([])),
    );
    let ciphers = "TLS_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256";
    // v1beta1: extraArgs are maps.
    let s1 = &spec(&objs, "kcpt-v1beta1")["kubeadmConfigSpec"];
    let api1 = &s1["clusterConfiguration"]["apiServer"];
    assert_eq!(api1["certSANs"], json!(["api.example.com"]));
    assert_eq!(
        s1["clusterConfiguration"]["imageRepository"],
        "registry.example.com/k8s"
    );
    let args1 = &api1["extraArgs"];
    assert_eq!(
        args1["enable-admission-plugins"],
        "NodeRestriction,AlwaysPullImages"
    );
    assert_eq!(args1["tls-cipher-suites"], ciphers);
    assert_eq!(args1["audit-log-maxage"], "7");
    assert_eq!(args1["audit-log-maxbackup"], "10");
    assert_eq!(
        args1["audit-log-path"],
        "/var/log/kubernetes/audit/audit.log"
    );
    assert_eq!(args1["oidc-issuer-url"], "https://id.example.com");
    assert_eq!(args1["oidc-client-id"], "k8s");
    assert_eq!(args1["oidc-username-claim"], "sub");
    assert_eq!(args1["authorization-mode"], "Node,RBAC,Webhook");
    for at in ["initConfiguration", "joinConfiguration"] {
        assert_eq!(
            s1[at]["nodeRegistration"]["kubeletExtraArgs"]["tls-cipher-suites"], ciphers,
            "{at}"
        );
    }
    let files: Vec<&str> = s1["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        files,
        [
            "/etc/kubernetes/audit-policy/policy.yaml",
            "/etc/kubernetes/webhooks/webhookconfig.yaml",
            "/etc/systemd/system/containerd.service.d/http-proxy.conf",
            "/etc/apt/apt.conf.d/90proxy"
        ]
    );
    let proxy = s1["files"][2]["content"].as_str().unwrap();
    assert!(
        proxy.contains("Environment=\"HTTP_PROXY=http://proxy:3128\""),
        "{proxy}"
    );
    assert!(
        proxy.contains("Environment=\"NO_PROXY=10.0.0.0/8,.svc\""),
        "{proxy}"
    );
    assert!(!proxy.contains("HTTPS_PROXY"), "{proxy}");
    let webhook = s1["files"][1]["content"].as_str().unwrap();
    assert!(
        webhook.contains("server: https://127.0.0.1:8443/webhook"),
        "{webhook}"
    );
    let vols: Vec<&str> = api1["extraVolumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(vols, ["audit-policy", "audit-logs", "webhooks"]);
    assert_eq!(
        s1["preKubeadmCommands"],
        json!(["systemctl daemon-reload && systemctl restart containerd"])
    );

    // v1beta2: the same arguments as name/value lists.
    let s2 = &spec(&objs, "kcpt-v1beta2")["kubeadmConfigSpec"];
    let args2 = s2["clusterConfiguration"]["apiServer"]["extraArgs"]
        .as_array()
        .unwrap();
    let arg = |name: &str| {
        args2
            .iter()
            .find(|a| a["name"] == name)
            .map(|a| a["value"].clone())
            .unwrap_or(Value::Null)
    };
    assert_eq!(
        arg("enable-admission-plugins"),
        "NodeRestriction,AlwaysPullImages"
    );
    assert_eq!(arg("audit-log-maxage"), "7");
    assert_eq!(arg("oidc-groups-prefix"), "");
    assert_eq!(arg("authorization-mode"), "Node,RBAC,Webhook");
    assert_eq!(
        s2["joinConfiguration"]["nodeRegistration"]["kubeletExtraArgs"],
        json!([{"name": "tls-cipher-suites", "value": ciphers}])
    );
    // Workers: kubelet ciphers and the proxies, both contracts.
    assert_eq!(
        spec(&objs, "kct-v1beta1")["joinConfiguration"]["nodeRegistration"]["kubeletExtraArgs"],
        json!({"tls-cipher-suites": ciphers})
    );
    let w2 = spec(&objs, "kct-v1beta2");
    assert_eq!(
        w2["joinConfiguration"]["nodeRegistration"]["kubeletExtraArgs"],
        json!([{"name": "tls-cipher-suites", "value": ciphers}])
    );
    assert_eq!(w2["files"].as_array().unwrap().len(), 2);

    // No apt proxy on flatcar.
    let objs = patched_objects(
        &engine(),
        H,
        vars(with(
            base(),
            "kubernetes",
            json!({"proxy": {"https": "http://p:1"}, "operatingSystem": "flatcar"}),
        )),
        minimal_items(json!([])),
    );
    let files = spec(&objs, "kct-v1beta1")["files"].clone();
    assert_eq!(files.as_array().unwrap().len(), 1, "{files}");
    assert_eq!(
        files[0]["path"],
        "/etc/systemd/system/containerd.service.d/http-proxy.conf"
    );
}

fn validate(values: Value) -> String {
    let req: ValidateTopologyRequest = serde_json::from_value(json!({
        "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1",
        "kind": "ValidateTopologyRequest",
        "variables": vars(values),
        "items": [],
    }))
    .unwrap();
    let r =
        serde_json::to_value(engine().validate_topology("openstack-v1-validate-topology", &req))
            .unwrap();
    if r["status"] == "Success" {
        return String::new();
    }
    r["message"].as_str().unwrap_or_default().to_string()
}

#[test]
fn bad_values_are_refused_with_field_paths() {
    assert_eq!(validate(base()), "");
    let cases = [
        (
            "openstackCluster",
            json!({"externalNetworkID": "not-a-uuid"}),
            "variables[openstackCluster].externalNetworkID",
        ),
        (
            "openstackCluster",
            json!({"nodeCIDR": "10.0.0.0"}),
            "variables[openstackCluster].nodeCIDR",
        ),
        (
            "openstackCluster",
            json!({"apiServerFloatingIP": {"mode": "given"}}),
            "an address is given exactly when mode is given",
        ),
        (
            "openstackCluster",
            json!({"disableExternalNetwork": true}),
            "set apiServerFloatingIP.mode to none",
        ),
        (
            "openstackCluster",
            json!({"subnet": {"name": "s"}}),
            "an existing subnet needs its existing network",
        ),
        (
            "openstackCluster",
            json!({"network": {"id": NET, "name": "n"}}),
            "give exactly one of id and name",
        ),
        (
            "openstackCluster",
            json!({"tags": ["a,b"]}),
            "variables[openstackCluster].tags[0]",
        ),
        (
            "openstackCluster",
            json!({"bastion": {"enabled": true}}),
            "an enabled bastion needs a flavor and an imageName",
        ),
        (
            "openstackControlPlane",
            json!({"image": {"id": IMAGE, "name": "x"}}),
            "give the image by id or by name",
        ),
        (
            "openstackControlPlane",
            json!({"image": {"id": IMAGE}, "rootVolume": {"type": "ssd"}}),
            "a boot volume type or zone needs a sizeGiB",
        ),
        (
            "openstackWorker",
            json!({"image": {"id": IMAGE}, "serverGroup": {"id": NET, "policy": "affinity"}}),
            "only one",
        ),
        (
            "openstackWorker",
            json!({"image": {"id": IMAGE}, "serverGroup": {"policy": "spread"}}),
            "variables[openstackWorker].serverGroup.policy",
        ),
        (
            "openstackWorker",
            json!({"image": {"id": IMAGE}, "additionalVolumes": [{"name": "root", "sizeGiB": 1}]}),
            "root is the boot volume's name",
        ),
        (
            "kubernetes",
            json!({"oidc": {"issuerURL": "http://id"}}),
            "must be an https:// URL",
        ),
        (
            "kubernetes",
            json!({"operatingSystem": "windows"}),
            "variables[kubernetes].operatingSystem",
        ),
        (
            "kubernetes",
            json!({"proxy": {"noProxy": ["x"]}}),
            "noProxy without a proxy",
        ),
    ];
    for (var, value, expect) in cases {
        let mut v = base();
        v[var] = value.clone();
        if var == "openstackCluster"
            && value.get("externalNetworkID").is_none()
            && value.get("disableExternalNetwork").is_none()
        {
            v[var]["externalNetworkID"] = json!(NET);
        }
        let msg = validate(v);
        assert!(
            msg.contains(expect),
            "{var} = {value}: expected {expect:?} in {msg:?}"
        );
    }
}
