package arch

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// source is the module's non-test Go code, parsed, by package directory
// (relative to root, slash-separated: "pkg/breaker").
type source struct {
	fset  *token.FileSet
	files map[string][]*ast.File
}

func parseSource(t *testing.T) *source {
	t.Helper()
	s := &source{fset: token.NewFileSet(), files: map[string][]*ast.File{}}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(s.fset, path, nil, 0)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		s.files[filepath.ToSlash(rel)] = append(s.files[filepath.ToSlash(rel)], f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// value is a constant's value as far as this test can work it out: a
// number, and whether a time unit made it a duration.
type value struct {
	v        constant.Value
	duration bool
}

func (v value) equal(w value) bool {
	return v.duration == w.duration && v.v.Kind() == w.v.Kind() && constant.Compare(v.v, token.EQL, w.v)
}

// defaultConst is a constant named Default… of some package.
type defaultConst struct {
	pkg, name string
	expr      ast.Expr
	val       value
	at        token.Position
}

// timeUnits are the time package's durations, in nanoseconds.
var timeUnits = map[string]int64{"Nanosecond": 1, "Microsecond": 1e3, "Millisecond": 1e6, "Second": 1e9, "Minute": 60e9, "Hour": 3600e9}

// eval works out e as a constant: literals, time's units, arithmetic, and
// names of the same package's constants (consts); false where it cannot.
func eval(e ast.Expr, consts map[string]ast.Expr, depth int) (value, bool) {
	if depth > 16 {
		return value{}, false
	}
	switch e := e.(type) {
	case *ast.BasicLit:
		return value{v: constant.MakeFromLiteral(e.Value, e.Kind, 0)}, true
	case *ast.ParenExpr:
		return eval(e.X, consts, depth+1)
	case *ast.Ident:
		if c, ok := consts[e.Name]; ok {
			return eval(c, consts, depth+1)
		}
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok && x.Name == "time" {
			if ns, ok := timeUnits[e.Sel.Name]; ok {
				return value{v: constant.MakeInt64(ns), duration: true}, true
			}
		}
	case *ast.BinaryExpr:
		x, ok1 := eval(e.X, consts, depth+1)
		y, ok2 := eval(e.Y, consts, depth+1)
		if !ok1 || !ok2 {
			return value{}, false
		}
		d := x.duration || y.duration
		if e.Op == token.SHL || e.Op == token.SHR {
			s, ok := constant.Uint64Val(y.v)
			if !ok {
				return value{}, false
			}
			return value{v: constant.Shift(x.v, e.Op, uint(s)), duration: d}, true
		}
		if e.Op == token.QUO && x.v.Kind() == constant.Int && y.v.Kind() == constant.Int {
			return value{v: constant.BinaryOp(x.v, token.QUO_ASSIGN, y.v), duration: d}, true
		}
		return value{v: constant.BinaryOp(x.v, e.Op, y.v), duration: d}, true
	}
	return value{}, false
}

// literal says whether e names nothing but time's units: a value written
// out rather than a constant named.
func literal(e ast.Expr) bool {
	lit := true
	ast.Inspect(e, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); !ok || x.Name != "time" {
				lit = false
			}
			return false
		case *ast.Ident:
			lit = false
		}
		return true
	})
	return lit
}

// constSpecs calls fn with each constant declaration of files.
func constSpecs(files []*ast.File, fn func(*ast.ValueSpec)) {
	for _, f := range files {
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
				for _, spec := range g.Specs {
					fn(spec.(*ast.ValueSpec))
				}
			}
		}
	}
}

// constsOf is a package's constants by name, and its Default… ones.
func (s *source) constsOf(dir string) (map[string]ast.Expr, []defaultConst) {
	consts := map[string]ast.Expr{}
	var defaults []defaultConst
	constSpecs(s.files[dir], func(vs *ast.ValueSpec) {
		for i, n := range vs.Names {
			if i >= len(vs.Values) {
				continue // iota blocks: not defaults
			}
			consts[n.Name] = vs.Values[i]
			if strings.HasPrefix(n.Name, "Default") {
				defaults = append(defaults, defaultConst{pkg: dir, name: n.Name, expr: vs.Values[i], at: s.fset.Position(n.Pos())})
			}
		}
	})
	for i := range defaults {
		defaults[i].val, _ = eval(defaults[i].expr, consts, 0)
	}
	return consts, defaults
}

// TestDefaultsStatedOnce: a default has one constant. Two packages'
// Default… constants of the same name and value, neither naming the
// other, are one default written twice; and a flag whose default is
// written out equal to a Default… constant of a package its file imports
// restates that package's default (the store timeout was written in
// three places, the max-wait formula in three).
func TestDefaultsStatedOnce(t *testing.T) {
	s := parseSource(t)
	byPkg := map[string][]defaultConst{}
	var all []defaultConst
	for dir := range s.files {
		_, d := s.constsOf(dir)
		byPkg[dir] = d
		all = append(all, d...)
	}
	if len(all) < 20 {
		t.Fatalf("found %d Default… constants; the walk missed the tree", len(all))
	}
	for i, a := range all {
		for _, b := range all[i+1:] {
			if a.pkg != b.pkg && a.name == b.name && a.val.v != nil && b.val.v != nil && a.val.equal(b.val) && literal(a.expr) && literal(b.expr) {
				t.Errorf("%s and %s: %s stated twice; let one name the other", a.at, b.at, a.name)
			}
		}
	}
	flags := 0
	for dir, files := range s.files {
		if !strings.HasPrefix(dir, "cmd/") && !strings.HasPrefix(dir, "internal/daemon/") {
			continue
		}
		consts, _ := s.constsOf(dir)
		for _, f := range files {
			imported := map[string][]defaultConst{} // by the name the file uses
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				rel, ours := strings.CutPrefix(path, strings.TrimSuffix(module, "/")+"/")
				if !ours {
					continue
				}
				name := filepath.Base(rel)
				if imp.Name != nil {
					name = imp.Name.Name
				}
				imported[name] = byPkg[rel]
			}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				arg, flag := flagDefault(call)
				if arg == nil || !literal(arg) {
					return true
				}
				flags++
				v, ok := eval(arg, consts, 0)
				if !ok {
					return true
				}
				for pkg, ds := range imported {
					for _, d := range ds {
						if d.val.v != nil && d.val.equal(v) {
							t.Errorf("%s: flag -%s's default restates %s.%s (%s); use it", s.fset.Position(arg.Pos()), flag, pkg, d.name, d.at)
						}
					}
				}
				return true
			})
		}
	}
	if flags == 0 {
		t.Fatal("no flag defaults found; the walk missed the daemons")
	}
}

// flagDefault is the default argument of a flag.FlagSet registration
// (fs.DurationVar(&v, "name", default, usage) or fs.Int("name", default,
// usage)) and the flag's name; nil when call is not one.
func flagDefault(call *ast.CallExpr) (ast.Expr, string) {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return nil, ""
	}
	base, isVar := strings.CutSuffix(sel.Sel.Name, "Var")
	switch base {
	case "Duration", "Int", "Int64", "Uint", "Uint64", "Float64":
	default:
		return nil, ""
	}
	i := 1
	if isVar {
		i = 2
	}
	if len(call.Args) != i+2 {
		return nil, ""
	}
	name, ok := call.Args[i-1].(*ast.BasicLit)
	if !ok || name.Kind != token.STRING {
		return nil, ""
	}
	n, _ := strconv.Unquote(name.Value)
	return call.Args[i], n
}

// TestMetricsDeclaredOnce: each metric's name is written in one place
// (with its help and labels), and the values of the decision-source label
// are limiter.Source's constants, written nowhere else as a label value.
func TestMetricsDeclaredOnce(t *testing.T) {
	s := parseSource(t)
	names := map[string][]token.Position{}
	var sources []string
	constSpecs(s.files["pkg/limiter"], func(vs *ast.ValueSpec) {
		if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "Source" {
			for _, v := range vs.Values {
				if lit, ok := v.(*ast.BasicLit); ok {
					sources = append(sources, lit.Value)
				}
			}
		}
	})
	if len(sources) < 5 {
		t.Fatalf("found %d limiter.Source values; the walk missed pkg/limiter/source.go", len(sources))
	}
	for dir, files := range s.files {
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.KeyValueExpr:
					if k, ok := n.Key.(*ast.Ident); ok && k.Name == "Name" {
						if lit, ok := n.Value.(*ast.BasicLit); ok && strings.HasPrefix(lit.Value, `"sluice_`) {
							names[lit.Value] = append(names[lit.Value], s.fset.Position(lit.Pos()))
						}
					}
				case *ast.CallExpr:
					sel, ok := n.Fun.(*ast.SelectorExpr)
					if !ok || (sel.Sel.Name != "WithLabelValues" && sel.Sel.Name != "GetMetricWithLabelValues") || dir == "pkg/limiter" {
						return true
					}
					for _, a := range n.Args {
						if lit, ok := a.(*ast.BasicLit); ok && slices.Contains(sources, lit.Value) {
							t.Errorf("%s: label value %s written out; it is a limiter.Source", s.fset.Position(lit.Pos()), lit.Value)
						}
					}
				}
				return true
			})
		}
	}
	if len(names) < 10 {
		t.Fatalf("found %d metric names; the walk missed the tree", len(names))
	}
	for name, at := range names {
		if len(at) > 1 {
			t.Errorf("metric %s declared %d times: %v", name, len(at), fmt.Sprint(at))
		}
	}
}
