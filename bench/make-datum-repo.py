#!/usr/bin/env python3
"""Write a Datum repository that declares every regular file of an estate.

  make-datum-repo.py SRC REPO PREFIX

SRC     the declared copy of an estate (e.g. built by make-estate.py)
REPO    the repository to write (datum.yaml + base/ with one File per file,
        content from `source:`, owner/group root, the file's mode)
PREFIX  the absolute path the estate lives at under --root (e.g. /estate)

The live estate at ROOT/PREFIX is expected to be a second build of the same
estate (same content), so `datum apply` on it is a no-op: the same input the
Puppet and Ansible peers get from gen-cm-peers.py.
"""
import os
import shutil
import stat
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    src, repo, prefix = sys.argv[1], sys.argv[2], sys.argv[3].rstrip("/")
    files_dir = os.path.join(repo, "base", "files")
    if os.path.exists(repo):
        shutil.rmtree(repo)
    os.makedirs(files_dir)
    with open(os.path.join(repo, "datum.yaml"), "w") as f:
        f.write("datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n")
    docs = []
    for d, dns, fns in os.walk(src):
        dns.sort()
        for fn in sorted(fns):
            p = os.path.join(d, fn)
            st = os.lstat(p)
            if not stat.S_ISREG(st.st_mode):
                continue
            rel = os.path.relpath(p, src)
            dst = os.path.join(files_dir, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(p, dst)
            docs.append(
                "datum: v1alpha1\ntype: File\nname: f%d\ndesired:\n  path: %s/%s\n"
                "  source: files/%s\n  owner: root\n  group: root\n  mode: \"%04o\"\n"
                % (len(docs), prefix, rel, rel, stat.S_IMODE(st.st_mode))
            )
    with open(os.path.join(repo, "base", "estate.yaml"), "w") as f:
        f.write("---\n".join(docs))
    print("%d File resources -> %s" % (len(docs), repo))


if __name__ == "__main__":
    main()
