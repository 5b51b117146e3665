//! `labctl image ls` and `labctl image prune` beside the running lab: the
//! listing names the image the lab that is up boots from (the one its
//! state records), and prune, on a cache holding that image, an image no
//! lab uses and an interrupted build's leftovers, removes the last two and
//! keeps the first. The prune runs on a cache of its own
//! (`LABCTL_CACHE_DIR`, the real image's files hard-linked into it), so the
//! user's cache is only read.

use std::fs;
use std::path::Path;

use libtest_mimic::{Failed, Trial};
use serde_json::Value;

use crate::util::{check, to_run, Labctl};

pub fn trials(lab: &Labctl) -> Vec<Trial> {
    let lab = lab.clone();
    vec![crate::timing::trial(
        "test_image_ls_names_the_lab_up_and_prune_removes_only_what_no_lab_uses",
        move || test_image_ls_names_the_lab_up_and_prune_removes_only_what_no_lab_uses(&lab),
    )]
}

fn in_cache(lab: &Labctl, cache: &Path, args: &[&str]) -> Result<Value, Failed> {
    let out = lab.command().args(args).env("LABCTL_CACHE_DIR", cache).output()?;
    to_run(out).ok()?.json()
}

fn test_image_ls_names_the_lab_up_and_prune_removes_only_what_no_lab_uses(lab: &Labctl) -> Result<(), Failed> {
    let state: Value = serde_json::from_slice(&fs::read(lab.state_dir("e2e").join("state.json"))?)?;
    let booted = state["provider_state"]["image"]
        .as_str()
        .ok_or("no image in the lab's state.json")?
        .to_string();

    // The user's cache, as it is: the lab's image is there, used by it.
    let listed = lab.run(&["image", "ls", "--json"]).ok()?.json()?;
    let images = listed["images"].as_array().ok_or("image ls: no images")?;
    let ours = images
        .iter()
        .find(|i| i["image"] == booted.as_str())
        .ok_or_else(|| format!("image ls does not list {booted}: {listed}"))?;
    check(
        ours["labs_up"].as_array().is_some_and(|l| l.iter().any(|n| n == "e2e"))
            && ours["labs_file"]
                .as_array()
                .is_some_and(|l| l.iter().any(|n| n == "e2e"))
            && ours["bytes"].as_u64().unwrap_or(0) > 50 << 20
            && ours["kernel"].as_str().is_some_and(|k| k.ends_with("-amd64")),
        || format!("the lab's image as listed: {ours}"),
    )?;

    // A cache of its own: the lab's image, an old one, a cut-off build.
    let cache = lab.state_base.join("image-cache");
    let _ = fs::remove_dir_all(&cache);
    let real = Path::new(ours["dir"].as_str().ok_or("no dir")?);
    for hash in [booted.as_str(), "0123456789abcdef"] {
        let dir = cache.join("images").join(hash);
        fs::create_dir_all(&dir)?;
        for file in ["vmlinux", "base.cpio", "image.env"] {
            if fs::hard_link(real.join(file), dir.join(file)).is_err() {
                fs::copy(real.join(file), dir.join(file))?;
            }
        }
    }
    fs::create_dir_all(cache.join("images/.build-fedcba9876543210-4242/out"))?;
    fs::write(cache.join("images/0123456789abcdef.build.log"), "image: done\n")?;

    // --all: even the labs file's images go, but never one a lab up uses.
    let pruned = in_cache(lab, &cache, &["image", "prune", "--all", "--json"])?;
    check(
        pruned["removed"] == serde_json::json!(["0123456789abcdef"])
            && pruned["leftovers"].as_array().map(Vec::len) == Some(2)
            && pruned["bytes"].as_u64().unwrap_or(0) > 50 << 20,
        || format!("prune: {pruned}"),
    )?;
    let left = in_cache(lab, &cache, &["image", "ls", "--json"])?;
    let names: Vec<&str> = left["images"]
        .as_array()
        .ok_or("no images")?
        .iter()
        .filter_map(|i| i["image"].as_str())
        .collect();
    let leftover_files: Vec<String> = fs::read_dir(cache.join("images"))?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".build-") || n.ends_with(".build.log"))
        .collect();
    check(names == [booted.as_str()] && leftover_files.is_empty(), || {
        format!("after prune: images {names:?}, leftovers {leftover_files:?}")
    })?;
    fs::remove_dir_all(&cache)?;
    Ok(())
}
