import json,sys,glob
for f in sorted(glob.glob(sys.argv[1] + '/*.json')):
    try: d=json.load(open(f))
    except Exception as e: continue
    out=[f.split('/')[-1]]
    ph = d.get('phases', d)
    for name in ('create','unlink'):
        p = ph.get(name)
        if p is None: continue
        st=p.get('stats',{})
        g=lambda k: st.get(k)
        out.append(f"{name}: {p.get('files_per_s',0):.0f}/s max={g('cil.writer_wait_us_max')} wall={g('cil.writer_wait_wall_us_max')} p99={g('cil.writer_wait_us_p99')} n={g('cil.writer_waits')} pre={g('cil.writer_waits_preempted')} closed={g('tx.gate_closed_us_max')} empty={g('tx.push_empty_swaps')} imp={g('tx.push_impatient_closes')} reop={g('tx.push_reopens')} def={g('tx.push_defers')}/{g('tx.push_defers_given_up')} swpre={g('tx.swaps_preempted')} pushes={g('cil.pushes')}")
    print(' | '.join(out))
