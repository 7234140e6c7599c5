#!/usr/bin/python3
"""arrows.py - the layout's one-way arrows, checked on the built objects.

Usage: arrows.py BUILD_OBJ_DIR

Reads the symbols each library object defines and needs (nm), draws an
arrow from file A to file B when A needs a symbol B defines, and fails when
 - the arrows between files make a circle (a strongly connected component
   of more than one file), or
 - an arrow points up the layers: shm/ uses nothing of ours; workers/ uses
   shm/; scheduler/ uses workers/ and shm/ (never the other way).
It also fails on any `#include "../` in the sources. Prints the file graph's
size and exits 0 when all holds. Standard library only.
"""
import os
import re
import subprocess
import sys

LAYER = {'shm': 0, 'workers': 1, 'scheduler': 2}


def symbols(obj):
    out = subprocess.run(['nm', '--defined-only', obj], capture_output=True, text=True,
                         check=True).stdout
    defined = {l.split()[-1] for l in out.splitlines()
               if len(l.split()) == 3 and l.split()[1] in 'TDBRVWGS'}
    out = subprocess.run(['nm', '--undefined-only', obj], capture_output=True, text=True,
                         check=True).stdout
    needed = {l.split()[-1] for l in out.splitlines() if l.split()}
    return defined, needed


def sccs(graph):
    """Tarjan's algorithm, iterative enough for a few hundred nodes."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def main():
    objdir = sys.argv[1]
    objs = []
    for top in LAYER:
        for root, _, files in os.walk(os.path.join(objdir, top)):
            # objects whose source is gone (a file moved or deleted) are stale
            objs += [os.path.join(root, f) for f in files if f.endswith('.o') and
                     os.path.exists(os.path.relpath(os.path.join(root, f), objdir)[:-2] + '.c')]
    name = {o: os.path.relpath(o, objdir)[:-2] + '.c' for o in objs}
    owner, needs = {}, {}
    for o in objs:
        d, n = symbols(o)
        for s in d:
            owner[s] = name[o]
        needs[name[o]] = n
    graph = {f: sorted({owner[s] for s in n if s in owner and owner[s] != f})
             for f, n in needs.items()}
    bad = []
    for comp in sccs(graph):
        if len(comp) > 1:
            bad.append('circle: ' + ' <-> '.join(sorted(comp)))
    for f, deps in graph.items():
        for g in deps:
            if LAYER[g.split('/')[0]] > LAYER[f.split('/')[0]]:
                bad.append('arrow up: %s -> %s' % (f, g))
    for top in list(LAYER) + ['include', 'tools', 'tests']:
        for root, _, files in os.walk(top):
            for f in files:
                if re.search(r'\.(c|h|cpp)$', f):
                    p = os.path.join(root, f)
                    with open(p, encoding='utf-8') as fh:
                        if re.search(r'#\s*include\s+"\.\./', fh.read()):
                            bad.append('include with ../: ' + p)
    for b in bad:
        print('arrows: ' + b)
    edges = sum(len(v) for v in graph.values())
    if bad:
        sys.exit(1)
    print('arrows: %d files, %d arrows, no circles, none pointing up, no ../ includes'
          % (len(graph), edges))


if __name__ == '__main__':
    main()
