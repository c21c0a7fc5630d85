// Browser-side steps of the run page's live updates (Dash clientside callbacks).
window.dash_clientside = Object.assign({}, window.dash_clientside, {
    rlguard: {
        // Append a tick's new points, dropping any at or before a trace's last x: a tick that
        // races a redraw (or another tick) can then never draw a point twice.
        appendNewPoints: function (live) {
            const outputs = dash_clientside.callback_context.outputs_list;
            return outputs.map((output, i) => {
                const payload = live && live.payloads ? live.payloads[i] : null;
                const node = document.getElementById(JSON.stringify(output.id));
                const plot = node && (node.classList.contains("js-plotly-plot")
                    ? node : node.querySelector(".js-plotly-plot"));
                if (!payload || !plot || !plot.data) { return dash_clientside.no_update; }
                const [update, traces] = payload;
                const xs = [], ys = [];
                let kept = 0;
                traces.forEach((trace, j) => {
                    const have = plot.data[trace] ? plot.data[trace].x : null;
                    const last = have && have.length ? have[have.length - 1] : null;
                    const fresh = update.x[j].map((x, k) => k).filter(
                        (k) => last === null || update.x[j][k] > last);
                    xs.push(fresh.map((k) => update.x[j][k]));
                    ys.push(fresh.map((k) => update.y[j][k]));
                    kept += fresh.length;
                });
                return kept ? [{x: xs, y: ys}, traces] : dash_clientside.no_update;
            });
        },
    },
});
