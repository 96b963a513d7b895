import json,sys,glob
for f in sorted(glob.glob(sys.argv[1] + '/*.json')):
    try: d=json.load(open(f))
    except Exception as e: print(f,'bad',e); continue
    out=[f.split('/')[-1]]
    ph = d.get('phases', d)
    for name in ('create','unlink'):
        p = ph[name] if isinstance(ph,dict) else None
        if p is None: continue
        st=p.get('stats',{})
        out.append(f"{name}: {p.get('files_per_s',0):.0f}/s max={st.get('cil.writer_wait_us_max')} wall={st.get('cil.writer_wait_wall_us_max')} p99={st.get('cil.writer_wait_us_p99')} p999={st.get('cil.writer_wait_us_p999')} reopen={st.get('tx.push_reopens')} pre={st.get('cil.writer_waits_preempted')} oncpu={st.get('cil.writer_wait_on_cpu_us_max')} n={st.get('cil.writer_waits')} closed={st.get('tx.gate_closed_us_max')}")
    print(' | '.join(out))
