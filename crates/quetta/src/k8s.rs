//! A sharded run as Kubernetes objects ([`Manifest`]): a headless Service that gives shard
//! 0 a stable name, an Indexed Job with one pod per shard (`JOB_COMPLETION_INDEX` is the
//! shard), and the volume shard 0 writes the merged run to. Each object is a typed struct
//! written as a YAML document (`serde_yaml_ng`), as Kubernetes users read and diff them, for
//! `kubectl apply -f -`.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::{Error, Result};

/// What the manifest describes.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// The Job's and Service's name (a DNS label).
    pub name: String,
    pub namespace: Option<String>,
    pub image: String,
    pub shards: u32,
    /// The rendezvous port on shard 0.
    pub port: u16,
    /// The container's arguments, the same for every shard (the pod's `JOB_COMPLETION_INDEX`
    /// says which shard it is): the program's command line for one shard of
    /// [`Manifest::shards`], meeting at [`Manifest::coordinator`] and writing to
    /// [`Manifest::results_dir`]. The caller renders them; the manifest adds none.
    pub args: Vec<String>,
    pub cpu: String,
    pub memory: String,
    pub results: Results,
    /// Environment variables of every shard taken from Kubernetes Secrets (an API key, the
    /// shard secret): the values are never in the manifest.
    pub env_from_secrets: Vec<SecretEnv>,
}

/// An environment variable set from a key of a Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretEnv {
    /// The variable's name, as the program reads it.
    pub env: String,
    /// The Secret's name.
    pub secret: String,
    /// The key within the Secret.
    pub key: String,
}

/// Where shard 0 writes the merged run (`/results/NAME`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Results {
    /// A new PersistentVolumeClaim (ReadWriteMany: every pod mounts it, shard 0 writes).
    NewClaim { size: String, storage_class: Option<String> },
    /// An existing claim.
    Claim(String),
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Object<S: Serialize> {
    api_version: &'static str,
    kind: &'static str,
    metadata: Meta,
    spec: S,
}

#[derive(Serialize, Clone)]
struct Meta {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<String>,
    labels: BTreeMap<String, String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ServiceSpec {
    #[serde(rename = "clusterIP")]
    cluster_ip: &'static str,
    /// Shard 0's name resolves before any readiness: the shards meet while starting.
    publish_not_ready_addresses: bool,
    selector: BTreeMap<String, String>,
    ports: Vec<ServicePort>,
}

#[derive(Serialize)]
struct ServicePort {
    name: &'static str,
    port: u16,
    protocol: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JobSpec {
    completion_mode: &'static str,
    completions: u32,
    parallelism: u32,
    /// A failed shard is not retried (its slice cannot rejoin a run already started), and
    /// does not stop the others: the merged run names it.
    backoff_limit_per_index: u32,
    template: PodTemplate,
}

#[derive(Serialize)]
struct PodTemplate {
    metadata: PodMeta,
    spec: PodSpec,
}

#[derive(Serialize)]
struct PodMeta {
    labels: BTreeMap<String, String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PodSpec {
    /// With the headless Service of the same name: pod K is `NAME-K.NAME`.
    subdomain: String,
    restart_policy: &'static str,
    security_context: PodSecurity,
    containers: Vec<Container>,
    volumes: Vec<Volume>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PodSecurity {
    run_as_non_root: bool,
    run_as_user: u32,
    fs_group: u32,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Container {
    name: &'static str,
    image: String,
    args: Vec<String>,
    ports: Vec<ContainerPort>,
    resources: Resources,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    env: Vec<EnvVar>,
    volume_mounts: Vec<VolumeMount>,
    security_context: ContainerSecurity,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ContainerSecurity {
    allow_privilege_escalation: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ContainerPort {
    name: &'static str,
    container_port: u16,
}

#[derive(Serialize)]
struct Resources {
    requests: BTreeMap<&'static str, String>,
    limits: BTreeMap<&'static str, String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EnvVar {
    name: String,
    value_from: EnvSource,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EnvSource {
    secret_key_ref: SecretKey,
}

#[derive(Serialize)]
struct SecretKey {
    name: String,
    key: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct VolumeMount {
    name: &'static str,
    mount_path: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Volume {
    name: &'static str,
    persistent_volume_claim: ClaimRef,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ClaimRef {
    claim_name: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ClaimSpec {
    access_modes: Vec<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    storage_class_name: Option<String>,
    resources: ClaimResources,
}

#[derive(Serialize)]
struct ClaimResources {
    requests: BTreeMap<&'static str, String>,
}

/// A DNS-1123 label: lower-case letters, digits and '-', at most 63 characters, starting
/// and ending with a letter or digit (the Service's name; pods add `-K`).
fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 52
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(quetta_engine::setting::Setting::JobName, format!("{name:?}: a Kubernetes name is lower-case letters, digits and '-', starting with a letter, at most 52 characters")))
    }
}

impl Manifest {
    /// Where the merged run goes inside the pods.
    pub fn results_dir(&self) -> String {
        format!("/results/{}", self.name)
    }

    /// Shard 0's stable address: its pod through the headless Service.
    pub fn coordinator(&self) -> String {
        format!("{0}-0.{0}:{1}", self.name, self.port)
    }

    /// The objects, one YAML document each.
    pub fn render(&self) -> Result<String> {
        check_name(&self.name)?;
        if self.shards == 0 {
            return Err(Error::invalid(
                quetta_engine::setting::Setting::Shards,
                "must be at least 1",
            ));
        }
        let labels: BTreeMap<String, String> = [
            ("app.kubernetes.io/name".to_owned(), "quetta".to_owned()),
            ("app.kubernetes.io/instance".to_owned(), self.name.clone()),
        ]
        .into();
        let meta =
            |name: String| Meta { name, namespace: self.namespace.clone(), labels: labels.clone() };
        let mut docs = Vec::new();
        let yaml = |v: Result<String, serde_yaml_ng::Error>| {
            v.map_err(|e| Error::Encode { what: "the manifest as YAML", source: Box::new(e) })
        };
        docs.push(yaml(serde_yaml_ng::to_string(&Object {
            api_version: "v1",
            kind: "Service",
            metadata: meta(self.name.clone()),
            spec: ServiceSpec {
                cluster_ip: "None",
                publish_not_ready_addresses: true,
                selector: labels.clone(),
                ports: vec![ServicePort { name: "rendezvous", port: self.port, protocol: "TCP" }],
            },
        }))?);
        let claim = match &self.results {
            Results::NewClaim { size, storage_class } => {
                let name = format!("{}-results", self.name);
                docs.push(yaml(serde_yaml_ng::to_string(&Object {
                    api_version: "v1",
                    kind: "PersistentVolumeClaim",
                    metadata: meta(name.clone()),
                    spec: ClaimSpec {
                        access_modes: vec!["ReadWriteMany"],
                        storage_class_name: storage_class.clone(),
                        resources: ClaimResources { requests: [("storage", size.clone())].into() },
                    },
                }))?);
                name
            }
            Results::Claim(c) => c.clone(),
        };
        docs.push(yaml(serde_yaml_ng::to_string(&self.job(
            meta(self.name.clone()),
            labels,
            claim,
        )))?);
        let mut out = String::new();
        for d in &docs {
            out.push_str("---\n");
            out.push_str(d);
        }
        Ok(out)
    }

    fn job(
        &self,
        metadata: Meta,
        labels: BTreeMap<String, String>,
        claim: String,
    ) -> Object<JobSpec> {
        let args = self.args.clone();
        let env = self
            .env_from_secrets
            .iter()
            .map(|s| EnvVar {
                name: s.env.clone(),
                value_from: EnvSource {
                    secret_key_ref: SecretKey { name: s.secret.clone(), key: s.key.clone() },
                },
            })
            .collect();
        let container = Container {
            name: "quetta",
            image: self.image.clone(),
            args,
            ports: vec![ContainerPort { name: "rendezvous", container_port: self.port }],
            resources: Resources {
                requests: [("cpu", self.cpu.clone()), ("memory", self.memory.clone())].into(),
                limits: [("memory", self.memory.clone())].into(),
            },
            env,
            volume_mounts: vec![VolumeMount { name: "results", mount_path: "/results" }],
            security_context: ContainerSecurity { allow_privilege_escalation: false },
        };
        Object {
            api_version: "batch/v1",
            kind: "Job",
            metadata,
            spec: JobSpec {
                completion_mode: "Indexed",
                completions: self.shards,
                parallelism: self.shards,
                backoff_limit_per_index: 0,
                template: PodTemplate {
                    metadata: PodMeta { labels },
                    spec: PodSpec {
                        subdomain: self.name.clone(),
                        restart_policy: "Never",
                        security_context: PodSecurity {
                            run_as_non_root: true,
                            run_as_user: 65532,
                            fs_group: 65532,
                        },
                        containers: vec![container],
                        volumes: vec![Volume {
                            name: "results",
                            persistent_volume_claim: ClaimRef { claim_name: claim },
                        }],
                    },
                },
            },
        }
    }
}
